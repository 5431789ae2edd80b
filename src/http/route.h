/*
 * route.h - private to src/http: the pure half of dispatch. It takes a
 * request target apart (path segments and query, percent-decoded and checked
 * for UTF-8), compiles the route table and matches a target against it.
 *
 * Nothing here knows libmicrohttpd, threads or the server: every function
 * depends only on its arguments, so http.c calls them on the polling thread
 * without its lock, and they could be tested without a socket. Failures that
 * the client caused come back as a struct route_error, the answer http.c
 * sends; codes are the module's (GPO_EINVAL, GPO_ENOMEM).
 */
#ifndef GPUORCH_HTTP_ROUTE_H
#define GPUORCH_HTTP_ROUTE_H

#include <stdbool.h>
#include <stddef.h>

#include "http/http.h"

#define ROUTE_MSG_MAX 160 /* bytes of a route_error message, with its NUL */

/* Why a request target was refused: the error answer to give. */
struct route_error {
    unsigned status;             /* 400; 500 when out of memory */
    const char *code;            /* static: "invalid_path", "invalid_query" or "internal" */
    char message[ROUTE_MSG_MAX]; /* one line; may quote client bytes (not yet UTF-8 safe) */
};

/* A query or path parameter. A path parameter's name points into its route's
 * pattern and is not NUL-terminated there: use name_len. */
struct route_kv {
    const char *name;
    size_t name_len;
    const char *value;
};

/* A request target taken apart: embedded in the request, route_target_init /
 * route_target_release. Every string points into `path` or `dec`. */
struct route_target {
    char *path;        /* owned: the target cut at '?' (or '#'), still percent-encoded */
    const char *query; /* the raw query, inside path's allocation; "" when none */
    char *dec;         /* owned: decoded segments and query items, NUL-separated */
    const char *seg[HTTP_MAX_SEGMENTS]; /* decoded path segments ("/" has none) */
    size_t nseg;
    bool too_deep; /* more than HTTP_MAX_SEGMENTS segments: matches no route */
    struct route_kv query_kv[HTTP_MAX_QUERY]; /* in request order */
    size_t nquery;
    struct route_kv param[HTTP_MAX_PARAMS]; /* set by route_target_bind */
    size_t nparam;
};

/* An opaque compiled route table: route_table_new / route_table_free. */
struct route_table;

/* What route_table_match found. */
enum route_match {
    ROUTE_FOUND,     /* a row matches the path and the method */
    ROUTE_NO_PATH,   /* no row's pattern matches the path: 404 */
    ROUTE_NO_METHOD, /* some pattern matches, but no such row has the method: 405 */
};

/*
 * Initializes *t from the raw request target `uri` (borrowed; copied): cut
 * at '?' into path and query, a '#' fragment dropped. Nothing is decoded or
 * checked yet. 0; GPO_ENOMEM, *t then empty (route_target_release is still
 * fine on it).
 */
int route_target_init(struct route_target *t, const char *uri);

/* Frees what *t owns and leaves it empty; fine on a zeroed target. */
void route_target_release(struct route_target *t);

/*
 * Splits t->path at '/' and percent-decodes each segment into t->seg (so a
 * %2F stays inside its segment); a path of more than HTTP_MAX_SEGMENTS
 * segments is marked too_deep, not refused. Then decodes the query into
 * t->query_kv ('+' is a space, an item without '=' has the value "", empty
 * items between '&'s are skipped). Call once, after route_target_init.
 * 0; GPO_EINVAL with *e a 400: invalid_path (not an absolute path, a bad
 * escape or %00) or invalid_query (the same in the query, an empty name, a
 * name or value not UTF-8, more than HTTP_MAX_QUERY items); GPO_ENOMEM with
 * *e the 500 internal answer.
 */
int route_target_parse(struct route_target *t, struct route_error *e);

/*
 * Compiles rows[0..n) (borrowed: the table points into the patterns, so they
 * must outlive it). Each row needs a handler, a method that is a non-empty
 * HTTP token, and a pattern that is "/" or up to HTTP_MAX_SEGMENTS
 * '/'-separated non-empty segments, each a literal without braces or a whole
 * {name} (1..HTTP_PARAM_NAME_MAX bytes, unique within the pattern, at most
 * HTTP_MAX_PARAMS of them). 0 and *ret_table (caller frees with
 * route_table_free); GPO_EINVAL with one line in err naming the row, e.g.
 * "route 3 (GET /v1/x{id}): a brace outside a whole {name} segment";
 * GPO_ENOMEM with "out of memory". err is errlen bytes, always terminated
 * (untouched when NULL or errlen is 0).
 */
int route_table_new(const struct http_route *rows, size_t n, struct route_table **ret_table,
                    char *err, size_t errlen);

/* Frees a table; NULL is fine. */
void route_table_free(struct route_table *tab);

/*
 * Finds the first row, in table order, whose pattern matches t's parsed path
 * (a {name} matches any non-empty segment) and whose method is `method`
 * (case matters; HEAD also matches a GET row). ROUTE_FOUND and *ret_index,
 * the row's index; ROUTE_NO_PATH or ROUTE_NO_METHOD (*ret_index untouched).
 */
enum route_match route_table_match(const struct route_table *tab, const struct route_target *t,
                                   const char *method, size_t *ret_index);

/*
 * Writes into buf (len bytes, always terminated; a long list is cut) the
 * value of a 405's Allow header for t's path: the method of every row whose
 * pattern matches, in table order, each once, then HEAD when a GET row is
 * among them and no HEAD row: "GET, DELETE, HEAD". "" when no row matches.
 */
void route_table_allow(const struct route_table *tab, const struct route_target *t, char *buf,
                       size_t len);

/*
 * Fills t->param from the {name} segments of row `index` (after ROUTE_FOUND
 * for it; names borrowed from the pattern, values from t's segments) and
 * checks each value: at most HTTP_PARAM_MAX bytes, valid UTF-8. 0; or
 * GPO_EINVAL with *e a 400 invalid_path naming the first bad parameter.
 * Call once per target.
 */
int route_target_bind(struct route_target *t, const struct route_table *tab, size_t index,
                      struct route_error *e);

/* Whether s (NUL-terminated) is valid UTF-8: no overlong forms, surrogates
 * or code points past U+10FFFF. */
bool route_utf8_valid(const char *s);

/* Replaces, in place, each byte of s that is not part of valid UTF-8 with
 * '?': for messages that quote client bytes. */
void route_utf8_sanitize(char *s);

/* Whether c is an RFC 9110 token character (methods, header names). */
bool route_is_tchar(char c);

#endif

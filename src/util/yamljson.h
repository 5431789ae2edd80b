/*
 * yamljson.h - one YAML document as a jansson tree, with where each node was.
 *
 * The document is read through libyaml's event API. Mappings become objects,
 * sequences arrays, and scalars take the YAML 1.2 core schema's types: a plain
 * scalar that reads as null (null, ~, nothing), a boolean (true, false), an
 * integer (decimal, 0o octal, 0x hex) or a float (1.5, 6214e9) becomes one;
 * every other plain scalar, every quoted one and one tagged !!str is a string.
 * An integer too big for 64 bits is a float; .inf and .nan stay strings
 * (jansson holds finite numbers only). Errors: duplicate keys, anchors and
 * aliases, other tags, keys that are not scalars or longer than
 * YAMLJSON_MAX_KEY bytes, NUL characters, more than one document, nesting
 * deeper than YAMLJSON_MAX_DEPTH, and an empty stream.
 *
 * Jansson keeps no positions, so two side tables are keyed by each node's
 * path, written as messages write it: keys joined by '.', sequence indexes in
 * brackets ("teams[2].quotas[0].pool"; "" is the root). A decoder that builds
 * its paths with yamljson_path_* finds the line of the node it is checking.
 */
#ifndef GPUORCH_UTIL_YAMLJSON_H
#define GPUORCH_UTIL_YAMLJSON_H

#include <stddef.h>

#include <jansson.h>
#include "base/err.h"

/* This module's own codes (util depends on no other module's table); they
 * have the values of core/err.h's GPO_EINVAL and GPO_ENOMEM. */
#define YAMLJSON_PATH_CAP  2048
#define YAMLJSON_MAX_DEPTH 16
#define YAMLJSON_MAX_KEY   64

/* A path being walked: push a key or an index, later pop back to the mark. */
struct yamljson_path {
    char s[YAMLJSON_PATH_CAP]; /* always terminated; cut at the cap */
    size_t len;
};

/* Append ".key" ("key" at the root) or "[i]"; return the mark to pop to. */
size_t yamljson_path_key(struct yamljson_path *p, const char *key);
size_t yamljson_path_index(struct yamljson_path *p, size_t i);
void yamljson_path_pop(struct yamljson_path *p, size_t mark);

struct yamljson {
    json_t *root;  /* the document */
    json_t *lines; /* path -> line (from 1) of the node; for a mapping's value, of its key */
    json_t *texts; /* path -> the text of each plain scalar not read as a string */
};

struct yamljson_error {
    long line;                 /* 0: not known */
    struct yamljson_path path; /* the node at fault; "" for a syntax error */
    char problem[256];         /* e.g. "duplicate key" */
};

/*
 * Parses `text` (len bytes, not necessarily terminated). 0 with *y filled
 * (release it with yamljson_release), or GPO_EINVAL / GPO_ENOMEM
 * with *e set and *y empty.
 */
int yamljson_parse(struct yamljson *y, const char *text, size_t len, struct yamljson_error *e);

/* Frees what *y holds and empties it; NULL is fine. */
void yamljson_release(struct yamljson *y);

/* The line of the node at `path`, or of the nearest enclosing node (a missing
 * field: its mapping's); 0 when there is none or y is NULL. */
long yamljson_line(const struct yamljson *y, const char *path);

/* The original text of the plain scalar at `path` when it was read as a null,
 * boolean or number (6214e9, not 6.214e12); NULL otherwise or if y is NULL.
 * Borrowed from *y. */
const char *yamljson_text(const struct yamljson *y, const char *path);

#endif

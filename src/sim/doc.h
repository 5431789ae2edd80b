/*
 * doc.h - reading the simulator's input files (cluster specs, policy files):
 * one YAML or JSON document, checked field by field, with messages that name
 * the file, the line and the field.
 *
 * Both formats end up as one jansson tree: JSON through jansson (if the text
 * starts with '{' after white space and a UTF-8 byte order mark), YAML through
 * util/yamljson.h, whose side tables give the line of each node and the text
 * of plain scalars, keyed by the node's path. A decoder keeps the path of the
 * node at hand in its struct sim_doc (sim_doc_key / _index / _pop), so every
 * message finds its line: "spec.yaml:14: teams[2].quotas[0].pool: no pool
 * named 'x'" (JSON gives lines for syntax errors only).
 *
 * Every function that fails writes that one-line message to the doc's err
 * and returns a negative core/err.h code.
 */
#ifndef GPUORCH_SIM_DOC_H
#define GPUORCH_SIM_DOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "util/yamljson.h"

/* Names (of pools, teams, policies): 1 to this many bytes, no control characters. */
#define SIM_DOC_NAME_MAX 128
/* sim_doc_get_num's default meaning "the field must be there". */
#define SIM_DOC_REQUIRED INT64_MIN

/* One document being decoded. */
struct sim_doc {
    const char *name; /* in messages: the file's path */
    char *err;        /* the message, errlen bytes; always terminated */
    size_t errlen;
    const struct yamljson *yaml; /* lines and texts; NULL for JSON */
    struct yamljson_path path;   /* the node at hand */
    json_t *json;                /* the tree of a JSON document (owned) */
    struct yamljson yaml_doc;    /* the tree of a YAML document (owned) */
    char noerr[1];               /* err when the caller gave none */
};

/*
 * Starts *d for a document called `name` (NULL: "input"); messages go to err
 * (errlen bytes; NULL or 0: nowhere), which is emptied.
 */
void sim_doc_init(struct sim_doc *d, const char *name, char *err, size_t errlen);
/* Frees the tree; d stays usable for messages. */
void sim_doc_release(struct sim_doc *d);

/*
 * Parses text (len bytes, not necessarily terminated) as JSON or YAML. 0 and
 * *ret_root the document (owned by d), or an error: a syntax error with its
 * line, GPO_ENOMEM.
 */
int sim_doc_parse(struct sim_doc *d, const char *text, size_t len, json_t **ret_root);

/*
 * Reads the file at path whole (at most 16 MiB: GPO_E2BIG above). 0 and
 * *ret (malloc'd, len bytes) or an error with its message in err ("PATH:
 * No such file or directory").
 */
int sim_doc_read_file(const char *path, char **ret, size_t *ret_len, char *err, size_t errlen);

/* Replaces control characters in s by '?', so a message stays one line. */
void sim_doc_one_line(char *s);

/* Appends ".key" ("key" at the root) or "[i]" to the path; returns the mark
 * to pop back to. */
size_t sim_doc_key(struct sim_doc *d, const char *key);
size_t sim_doc_index(struct sim_doc *d, size_t i);
void sim_doc_pop(struct sim_doc *d, size_t mark);

/* "NAME[:LINE]: PATH: problem" for the node at hand (or at `line`); returns rc. */
int sim_doc_fail(struct sim_doc *d, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int sim_doc_fail_at(struct sim_doc *d, int rc, long line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#ifdef __clang_analyzer__
/* clang's static analyzer (make lint) does not follow calls into variadic
 * functions: for the analysis only, these say that they return rc. */
#define sim_doc_fail(d, rc, ...)                                                                   \
    __extension__({                                                                                \
        int sim_doc_rc_ = (rc);                                                                    \
        (void)sim_doc_fail(d, sim_doc_rc_, __VA_ARGS__), sim_doc_rc_;                              \
    })
#define sim_doc_fail_at(d, rc, ...)                                                                \
    __extension__({                                                                                \
        int sim_doc_rc_ = (rc);                                                                    \
        (void)sim_doc_fail_at(d, sim_doc_rc_, __VA_ARGS__), sim_doc_rc_;                           \
    })
#endif

/* A value as a message shows it (in buf, n bytes): its YAML text where there
 * is one ("6214e9", not 6.214e12), else "a string ('x')", "a list", ... */
const char *sim_doc_shown(const struct sim_doc *d, const json_t *v, char *buf, size_t n);

/* Rules for a number in a document: its range there, and the factor to the
 * stored unit (the result rounded). */
struct sim_doc_num {
    bool integer; /* whole numbers only; else fractions allowed */
    double min;   /* lowest value, or (min_open) the bound above which it must be */
    bool min_open;
    double max;
    double scale; /* GiB -> MiB: 1024; GPUs -> milli: 1000 (fractions only) */
    int over_rc;  /* over max: GPO_E2BIG for a cap, GPO_EINVAL otherwise */
};

/* v (at the path at hand) by rule r, into *ret. */
int sim_doc_num(struct sim_doc *d, const json_t *v, const struct sim_doc_num *r, int64_t *ret);
/* Field `key` of o by rule r; def when absent (SIM_DOC_REQUIRED: an error). */
int sim_doc_get_num(struct sim_doc *d, const json_t *o, const char *key,
                    const struct sim_doc_num *r, int64_t def, int64_t *ret);
/* Field `key` of o as a string (NULL when absent and optional), borrowed from
 * the tree: 1 to SIM_DOC_NAME_MAX bytes, and no control characters if `name`. */
int sim_doc_get_str(struct sim_doc *d, const json_t *o, const char *key, bool required, bool name,
                    const char **ret);
/* Field `key` of o as true or false; def when absent. */
int sim_doc_get_bool(struct sim_doc *d, const json_t *o, const char *key, bool def, bool *ret);
/* o is a mapping with only the fields in keys (NULL-terminated). */
int sim_doc_check_object(struct sim_doc *d, const json_t *o, const char *const *keys);
/* Field `key` of o as a list of at most max entries (over_rc above), or NULL
 * when absent and optional; a required list may not be empty. */
int sim_doc_get_list(struct sim_doc *d, const json_t *o, const char *key, bool required, size_t max,
                     int over_rc, json_t **ret);

#endif

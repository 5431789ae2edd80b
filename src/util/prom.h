/*
 * prom.h - writing the Prometheus text exposition format (version 0.0.4),
 * as GET /metrics serves it.
 *
 * A struct prom is one exposition being written into a growing buffer.
 * Each metric family is opened once with prom_family (its # HELP and # TYPE
 * lines), then its samples follow. Label values are escaped as the format
 * says (backslash, double quote, newline); a label whose value is "" is left
 * out, as Prometheus treats both alike. Values print as the shortest text
 * that reads back to the same double ("NaN", "+Inf", "-Inf" included).
 *
 * Errors are sticky: once out of memory (or misused: a sample of a family
 * never opened, a name or label that is not valid), every later call does
 * nothing and prom_text returns NULL, so a renderer may call on and check
 * once at the end.
 *
 * Not thread-safe: one writer per struct prom.
 */
#ifndef GPUORCH_UTIL_PROM_H
#define GPUORCH_UTIL_PROM_H

#include <stddef.h>
#include <stdint.h>

struct prom;

enum prom_type {
    PROM_GAUGE,
    PROM_COUNTER,
    PROM_HISTOGRAM,
    PROM_SUMMARY,
};

/* A new, empty exposition; NULL when out of memory. */
struct prom *prom_new(void);
/* NULL is fine. */
void prom_free(struct prom *p);

/*
 * Opens family `name` ([a-zA-Z_:][a-zA-Z0-9_:]*): writes "# HELP name help"
 * (help escaped: backslash and newline) and "# TYPE name type". A family
 * opened twice in one exposition is misuse.
 *
 * A counter's name gets "_total" appended when it lacks it: in the text
 * format 0.0.4 the HELP and TYPE lines must name the samples exactly, and
 * counters' samples end in "_total" by convention (promtool's lint wants
 * it). So "gpuorch_cost" and "gpuorch_cost_total" open the same family.
 */
void prom_family(struct prom *p, const char *name, enum prom_type type, const char *help);

/*
 * One sample of the family opened last: `name` is the family's name as
 * given to prom_family (a counter's with or without "_total": it is written
 * with it; a histogram's and a summary's samples go through prom_histogram
 * and prom_summary). `labels` is NULL or a NULL-terminated list of name, value
 * pairs, borrowed: {"team", "ml", "priority", "high", NULL}. Label names are
 * [a-zA-Z_][a-zA-Z0-9_]*.
 */
void prom_sample(struct prom *p, const char *name, const char *const *labels, double value);

/*
 * One histogram of the family opened last (PROM_HISTOGRAM): for each of the
 * nbounds upper bounds (increasing), name_bucket{...,le="bound"} with the
 * cumulative count of observations <= it, then le="+Inf" with `count`,
 * name_sum and name_count. counts[k] is the number of observations in
 * (bounds[k-1], bounds[k]] (not cumulative).
 */
void prom_histogram(struct prom *p, const char *name, const char *const *labels,
                    const double *bounds, const uint64_t *counts, size_t nbounds, double sum,
                    uint64_t count);

/*
 * One summary of the family opened last (PROM_SUMMARY): for each of the n
 * quantiles (increasing, within 0..1), name{...,quantile="q"} with its value,
 * then name_sum and name_count. A label "quantile" is misuse.
 */
void prom_summary(struct prom *p, const char *name, const char *const *labels,
                  const double *quantiles, const double *values, size_t n, double sum,
                  uint64_t count);

/* The text so far, NUL-terminated (borrowed, valid until the next call or
 * prom_free) and its length; NULL once an error happened. */
const char *prom_text(const struct prom *p, size_t *ret_len);

#endif

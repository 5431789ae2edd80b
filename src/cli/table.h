/*
 * table.h - rows of text printed with aligned columns, as squeue and sinfo
 * print them: the queue, the nodes, a job's attempts.
 *
 * Cells are copied, their control characters shown as '?' (a job's name or
 * reason may hold text from anyone); widths count characters (UTF-8), not
 * bytes; the last column is not padded.
 */
#ifndef GPUORCH_CLI_TABLE_H
#define GPUORCH_CLI_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include "base/err.h"

struct table;

/* A table with ncols columns named by headers (borrowed, ncols strings).
 * NULL when out of memory. Free with table_free (NULL is fine). */
struct table *table_new(size_t ncols, const char *const *headers);
void table_free(struct table *t);
/* Adds one row of ncols cells (copied; NULL shows as "-"). 0 or GPO_ENOMEM. */
int table_add(struct table *t, const char *const *cells);
/* Prints the header and the rows; columns are two spaces apart, widths in
 * characters (UTF-8). */
void table_print(const struct table *t, FILE *out);
/* The same, without the header line when `header` is false (the widths
 * still count it, so that columns do not move between the two). */
void table_print_rows(const struct table *t, FILE *out, bool header);

#endif

/*
 * table.c - rows of text printed with aligned columns (table.h).
 */
#include "cli/table.h"

#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

struct table {
    size_t ncols;
    char **cells; /* row-major; row 0 is the header */
    size_t nrows, cap;
};

void table_free(struct table *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->nrows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    free(t);
}

struct table *table_new(size_t ncols, const char *const *headers)
{
    struct table *t = calloc(1, sizeof(*t));
    if (!t || ncols == 0) {
        free(t);
        return NULL;
    }
    t->ncols = ncols;
    if (table_add(t, headers)) {
        table_free(t);
        return NULL;
    }
    return t;
}

/* A copy of s fit for a terminal: control characters (C0, DEL, C1) as '?'. */
static char *cell_copy(const char *s)
{
    char *c = strdup(s ? s : "-");
    for (size_t i = 0; c && c[i]; i++) {
        unsigned char b = (unsigned char)c[i];
        if (b < 0x20 || b == 0x7f)
            c[i] = '?';
        else if (b == 0xC2 && (unsigned char)c[i + 1] >= 0x80 && (unsigned char)c[i + 1] <= 0x9F)
            c[i] = c[i + 1] = '?';
    }
    return c;
}

int table_add(struct table *t, const char *const *cells)
{
    if (t->nrows == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        char **p = realloc(t->cells, cap * t->ncols * sizeof(*p));
        if (!p)
            return GPO_ENOMEM;
        t->cells = p;
        t->cap = cap;
    }
    char **row = t->cells + t->nrows * t->ncols;
    for (size_t k = 0; k < t->ncols; k++) {
        if (!(row[k] = cell_copy(cells[k]))) {
            while (k-- > 0)
                free(row[k]);
            return GPO_ENOMEM;
        }
    }
    t->nrows++;
    return 0;
}

/* Characters in a UTF-8 string: bytes that do not continue one. */
static size_t width(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

void table_print(const struct table *t, FILE *out)
{
    table_print_rows(t, out, true);
}

void table_print_rows(const struct table *t, FILE *out, bool header)
{
    size_t *w = calloc(t->ncols, sizeof(*w)), ncols = t->ncols;
    if (!w) { /* out of memory: unaligned is better than nothing */
        for (size_t i = header ? 0 : ncols; i < t->nrows * ncols; i++)
            fprintf(out, "%s%s", t->cells[i], (i + 1) % ncols ? "  " : "\n");
        return;
    }
    for (size_t r = 0; r < t->nrows; r++)
        for (size_t k = 0; k < ncols; k++) {
            size_t n = width(t->cells[r * t->ncols + k]);
            w[k] = n > w[k] ? n : w[k];
        }
    for (size_t r = header ? 0 : 1; r < t->nrows; r++) {
        for (size_t k = 0; k < ncols; k++) {
            const char *cell = t->cells[r * t->ncols + k];
            if (k + 1 == ncols)
                fprintf(out, "%s\n", cell);
            else
                fprintf(out, "%s%*s", cell, (int)(w[k] - width(cell) + 2), "");
        }
    }
    free(w);
}

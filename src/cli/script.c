/*
 * script.c - the directive block of a batch script (script.h).
 */
#include "cli/script.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "util/errbuf.h"
#include "base/banned.h"

static const struct {
    enum script_prefix prefix;
    const char *text;
} prefixes[] = {
    {SCRIPT_SBATCH, "#SBATCH"},
    {SCRIPT_GPUORCH, "#GPUORCH"},
};

const char *script_prefix_name(enum script_prefix p)
{
    return p == SCRIPT_GPUORCH ? "#GPUORCH" : "#SBATCH";
}

static bool blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

/* The prefix a line begins with, as a directive; NULL when it is not one. */
static const char *directive_prefix(const char *s, size_t len, enum script_prefix *ret)
{
    for (size_t k = 0; k < sizeof(prefixes) / sizeof(prefixes[0]); k++) {
        size_t n = strlen(prefixes[k].text);
        if (len >= n && memcmp(s, prefixes[k].text, n) == 0 && (len == n || blank(s[n]))) {
            *ret = prefixes[k].prefix;
            return prefixes[k].text;
        }
    }
    return NULL;
}

static void words_free(char **w, size_t n)
{
    for (size_t i = 0; w && i < n; i++)
        free(w[i]);
    free(w);
}

/* Reads one word at s[*pos..len) into out (which has room for len bytes),
 * as a shell would. */
static int one_word(const char *s, size_t len, size_t *pos, char *out, long line, char *err,
                    size_t errlen)
{
    size_t i = *pos, o = 0;
    while (i < len && !blank(s[i])) {
        char c = s[i++];
        if (c == '\\' && i < len) {
            out[o++] = s[i++];
        } else if (c == '\'' || c == '"') {
            while (i < len && s[i] != c) {
                if (c == '"' && s[i] == '\\' && i + 1 < len &&
                    (s[i + 1] == '"' || s[i + 1] == '\\'))
                    i++;
                out[o++] = s[i++];
            }
            if (i == len)
                return errbuf_set(err, errlen, GPO_EUSAGE, "line %ld: a quote (%c) is not closed",
                                  line, c);
            i++;
        } else {
            out[o++] = c;
        }
    }
    out[o] = '\0';
    *pos = i;
    return 0;
}

/* Splits s[0..len) into words (see script.h). */
static int split(const char *s, size_t len, long line, char ***ret, size_t *ret_n, char *err,
                 size_t errlen)
{
    char **w = calloc(SCRIPT_WORDS_MAX + 1, sizeof(*w));
    size_t n = 0, pos = 0;
    int rc = w ? 0 : errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    while (rc == 0) {
        while (pos < len && blank(s[pos]))
            pos++;
        if (pos == len || s[pos] == '#')
            break;
        if (n == SCRIPT_WORDS_MAX) {
            rc = errbuf_set(err, errlen, GPO_EUSAGE, "line %ld: more than %d words", line,
                            SCRIPT_WORDS_MAX);
            break;
        }
        if (!(w[n] = malloc(len - pos + 1))) {
            rc = errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
            break;
        }
        rc = one_word(s, len, &pos, w[n], line, err, errlen);
        n++;
    }
    if (rc) {
        words_free(w, n);
        return rc;
    }
    *ret = w;
    *ret_n = n;
    return 0;
}

/* Whether an array grown in powers of two (from 4) needs room for element n. */
static bool need_room(size_t n)
{
    return n == 0 || (n >= 4 && (n & (n - 1)) == 0);
}

static size_t room_for(size_t n)
{
    return n ? n * 2 : 4;
}

static int add_directive(struct script_header *h, enum script_prefix prefix, const char *s,
                         size_t len, long line, char *err, size_t errlen)
{
    if (memchr(s, '\0', len))
        return errbuf_set(err, errlen, GPO_EUSAGE, "line %ld: a NUL byte in a directive", line);
    if (h->n == SCRIPT_DIRECTIVES_MAX)
        return errbuf_set(err, errlen, GPO_EUSAGE, "line %ld: more than %d directives", line,
                          SCRIPT_DIRECTIVES_MAX);
    if (need_room(h->n)) {
        void *p = realloc(h->directives, room_for(h->n) * sizeof(*h->directives));
        if (!p)
            return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
        h->directives = p;
    }
    struct script_directive *d = &h->directives[h->n];
    *d = (struct script_directive){.prefix = prefix, .line = line};
    int rc = split(s, len, line, &d->words, &d->nwords, err, errlen);
    if (rc == 0)
        h->n++;
    return rc;
}

int script_header_parse(const char *text, size_t len, struct script_header *ret, char *err,
                        size_t errlen)
{
    struct script_header h = {0};
    long line = 0;
    int rc = 0;
    if (!text && len)
        return errbuf_set(err, errlen, GPO_EINVAL, "script_header_parse: NULL text");
    for (size_t at = 0; at < len && rc == 0;) {
        const char *s = text + at, *nl = memchr(s, '\n', len - at);
        size_t n = nl ? (size_t)(nl - s) : len - at;
        at += n + 1;
        line++;
        enum script_prefix prefix;
        const char *p = directive_prefix(s, n, &prefix);
        if (p && !h.first_command) {
            rc = add_directive(&h, prefix, s + strlen(p), n - strlen(p), line, err, errlen);
            continue;
        }
        if (p) {
            long *late =
                need_room(h.nlate) ? realloc(h.late, room_for(h.nlate) * sizeof(long)) : h.late;
            if (!late) {
                rc = errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
                continue;
            }
            h.late = late;
            h.late[h.nlate++] = line;
            continue;
        }
        size_t i = 0;
        while (i < n && blank(s[i]))
            i++;
        if (i < n && s[i] != '#' && !h.first_command)
            h.first_command = line;
    }
    if (rc) {
        script_header_release(&h);
        return rc;
    }
    *ret = h;
    return 0;
}

void script_header_release(struct script_header *h)
{
    if (!h)
        return;
    for (size_t k = 0; k < h->n; k++)
        words_free(h->directives[k].words, h->directives[k].nwords);
    free(h->directives);
    free(h->late);
    memset(h, 0, sizeof(*h));
}

/*
 * route.c - request targets and the route table: percent-decoding, UTF-8
 * checks, pattern compilation and matching. Pure; see route.h.
 *
 * A compiled pattern is a run of segments in one array shared by the whole
 * table, so matching a request walks flat memory and allocates nothing.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/route.h"
#include "base/banned.h"

struct route_seg {
    const char *s; /* a literal, or the name inside {} */
    size_t len;
    bool param;
};

struct route_span {
    size_t first, nseg; /* the row's segments in route_table.segs */
};

struct route_table {
    const struct http_route *rows;
    size_t nrows;
    struct route_span *spans; /* one per row */
    struct route_seg *segs;
};

/* ---- text: UTF-8 and percent-decoding ---- */

/* The length of the valid UTF-8 sequence at s (n bytes left), 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t len;
    uint32_t cp, min;
    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xC2 && s[0] <= 0xDF)
        len = 2, cp = s[0] & 0x1Fu, min = 0x80;
    else if ((s[0] & 0xF0) == 0xE0)
        len = 3, cp = s[0] & 0x0Fu, min = 0x800;
    else if (s[0] >= 0xF0 && s[0] <= 0xF4)
        len = 4, cp = s[0] & 0x07u, min = 0x10000;
    else
        return 0;
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

bool route_utf8_valid(const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0, k; i < n; i += k)
        if (!(k = utf8_len((const unsigned char *)s + i, n - i)))
            return false;
    return true;
}

void route_utf8_sanitize(char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0, k; i < n; i += k)
        if (!(k = utf8_len((const unsigned char *)s + i, n - i)))
            s[i] = '?', k = 1;
}

bool route_is_tchar(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes [s, s+n) into *dst (NUL-terminated) and advances *dst past it;
 * '+' is a space when `plus`. False on a bad escape or %00. */
static bool pct_decode(const char *s, size_t n, char **dst, bool plus)
{
    char *d = *dst;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%') {
            if (n - i < 3)
                return false;
            int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                return false;
            *d++ = (char)(hi << 4 | lo);
            i += 2;
        } else {
            *d++ = (char)(plus && s[i] == '+' ? ' ' : s[i]);
        }
    }
    *d++ = '\0';
    *dst = d;
    return true;
}

/* ---- the request target ---- */

/* Fills *e; returns the code for it (500 is only ever out of memory). */
__attribute__((format(printf, 4, 5))) static int refuse(struct route_error *e, unsigned status,
                                                        const char *code, const char *fmt, ...)
{
    va_list ap;
    e->status = status;
    e->code = code;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    return status == 500 ? GPO_ENOMEM : GPO_EINVAL;
}

int route_target_init(struct route_target *t, const char *uri)
{
    memset(t, 0, sizeof(*t));
    t->query = "";
    if (!(t->path = strdup(uri)))
        return GPO_ENOMEM;
    char *q = t->path + strcspn(t->path, "?#");
    if (*q == '?') {
        q[1 + strcspn(q + 1, "#")] = '\0';
        t->query = q + 1;
    }
    *q = '\0';
    return 0;
}

void route_target_release(struct route_target *t)
{
    free(t->dec);
    free(t->path);
    t->dec = t->path = NULL;
    t->query = "";
}

static int parse_query(struct route_target *t, char *dst, struct route_error *e)
{
    for (const char *p = t->query; *p;) {
        size_t n = strcspn(p, "&");
        const char *eq = memchr(p, '=', n);
        size_t kn = eq ? (size_t)(eq - p) : n;
        if (n > 0) {
            if (t->nquery == HTTP_MAX_QUERY)
                return refuse(e, 400, "invalid_query", "more than %u query parameters",
                              HTTP_MAX_QUERY);
            if (kn == 0)
                return refuse(e, 400, "invalid_query", "a query parameter without a name");
            struct route_kv *q = &t->query_kv[t->nquery];
            q->name = dst;
            if (!pct_decode(p, kn, &dst, true))
                return refuse(e, 400, "invalid_query", "bad percent-encoding in the query");
            q->value = dst;
            if (!pct_decode(eq ? eq + 1 : p + n, eq ? n - kn - 1 : 0, &dst, true))
                return refuse(e, 400, "invalid_query", "bad percent-encoding in the query");
            if (!route_utf8_valid(q->name) || !route_utf8_valid(q->value))
                return refuse(e, 400, "invalid_query", "a query parameter is not valid UTF-8");
            q->name_len = strlen(q->name);
            t->nquery++;
        }
        p += n + (p[n] == '&');
    }
    return 0;
}

int route_target_parse(struct route_target *t, struct route_error *e)
{
    const char *path = t->path;
    size_t len = strlen(path) + strlen(t->query);
    if (path[0] != '/')
        return refuse(e, 400, "invalid_path", "the request target must be an absolute path");
    /* decoding never grows a string; each decoded item adds one NUL */
    char *dst = t->dec = malloc(2 * len + 2);
    if (!dst)
        return refuse(e, 500, "internal", "out of memory");
    for (const char *p = path + 1; path[1] != '\0';) { /* "/" has no segment */
        size_t n = strcspn(p, "/");
        if (t->nseg == HTTP_MAX_SEGMENTS) {
            t->too_deep = true;
            break;
        }
        t->seg[t->nseg++] = dst;
        if (!pct_decode(p, n, &dst, false))
            return refuse(e, 400, "invalid_path", "bad percent-encoding in the path");
        if (p[n] == '\0')
            break;
        p += n + 1;
    }
    return parse_query(t, dst, e);
}

/* ---- compiling the table ---- */

static const char *check_segment(const char *p, size_t n, bool param, size_t nseg)
{
    if (nseg == HTTP_MAX_SEGMENTS)
        return "too many segments";
    if (n == 0)
        return "an empty segment";
    if ((memchr(p, '{', n) || memchr(p, '}', n)) && !param)
        return "a brace outside a whole {name} segment";
    if (param && (n == 2 || n - 2 > HTTP_PARAM_NAME_MAX))
        return "a parameter name is empty or too long";
    return NULL;
}

/* Compiles row i's pattern into tab->segs from *nsegs on; NULL, or why the
 * row is refused. */
static const char *compile_row(struct route_table *tab, size_t i, size_t *nsegs)
{
    const struct http_route *r = &tab->rows[i];
    struct route_span *sp = &tab->spans[i];
    const char *why = NULL, *p;
    size_t nparams = 0;
    *sp = (struct route_span){.first = *nsegs};
    for (p = r->method; *p && !why; p++)
        why = route_is_tchar(*p) ? NULL : "the method is not an HTTP token";
    if (!why && !r->method[0])
        why = "empty method";
    if (!why && r->pattern[0] != '/')
        why = "the pattern must start with '/'";
    for (p = r->pattern + 1; !why && r->pattern[1] != '\0';) { /* "/" has no segment */
        size_t n = strcspn(p, "/");
        bool param = n >= 2 && p[0] == '{' && p[n - 1] == '}';
        struct route_seg *cs = &tab->segs[*nsegs];
        if ((why = check_segment(p, n, param, sp->nseg)))
            break;
        if (param && ++nparams > HTTP_MAX_PARAMS)
            why = "too many parameters";
        *cs = (struct route_seg){.s = param ? p + 1 : p, .len = param ? n - 2 : n, .param = param};
        for (size_t k = sp->first; k < *nsegs && param && !why; k++)
            if (tab->segs[k].param && tab->segs[k].len == cs->len &&
                memcmp(tab->segs[k].s, cs->s, cs->len) == 0)
                why = "a parameter name appears twice";
        (*nsegs)++;
        sp->nseg++;
        if (p[n] == '\0')
            break;
        p += n + 1;
    }
    return why;
}

int route_table_new(const struct http_route *rows, size_t n, struct route_table **ret_table,
                    char *err, size_t errlen)
{
    struct route_table *tab = calloc(1, sizeof(*tab));
    size_t nsegs = 0, maxsegs = 0;
    if (!err)
        errlen = 0;
    for (size_t i = 0; i < n; i++) { /* a pattern has at most one segment per '/' */
        size_t k = 0;
        for (const char *p = rows[i].pattern; p && *p; p++)
            k += *p == '/';
        maxsegs += k < HTTP_MAX_SEGMENTS ? k : HTTP_MAX_SEGMENTS;
    }
    if (tab) {
        tab->rows = rows;
        tab->nrows = n;
        tab->spans = calloc(n + 1, sizeof(*tab->spans));
        tab->segs = calloc(maxsegs + 1, sizeof(*tab->segs));
    }
    if (!tab || !tab->spans || !tab->segs) {
        snprintf(err, errlen, "out of memory");
        route_table_free(tab);
        return GPO_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        const struct http_route *r = &rows[i];
        const char *why = NULL;
        if (!r->method || !r->pattern || !r->handler)
            snprintf(err, errlen, "route %zu: method, pattern and handler are required", i);
        else if ((why = compile_row(tab, i, &nsegs)))
            snprintf(err, errlen, "route %zu (%s %s): %s", i, r->method, r->pattern, why);
        if (!r->method || !r->pattern || !r->handler || why) {
            route_table_free(tab);
            return GPO_EINVAL;
        }
    }
    *ret_table = tab;
    return 0;
}

void route_table_free(struct route_table *tab)
{
    if (!tab)
        return;
    free(tab->spans);
    free(tab->segs);
    free(tab);
}

/* ---- matching ---- */

static bool path_matches(const struct route_table *tab, size_t i, const struct route_target *t)
{
    const struct route_span *sp = &tab->spans[i];
    if (t->too_deep || sp->nseg != t->nseg)
        return false;
    for (size_t k = 0; k < sp->nseg; k++) {
        const struct route_seg *cs = &tab->segs[sp->first + k];
        const char *s = t->seg[k];
        if (cs->param ? s[0] == '\0' : strlen(s) != cs->len || memcmp(s, cs->s, cs->len) != 0)
            return false;
    }
    return true;
}

static bool method_matches(const struct http_route *r, const char *method)
{
    return strcmp(r->method, method) == 0 ||
           (strcmp(method, "HEAD") == 0 && strcmp(r->method, "GET") == 0);
}

enum route_match route_table_match(const struct route_table *tab, const struct route_target *t,
                                   const char *method, size_t *ret_index)
{
    bool path_seen = false;
    for (size_t i = 0; i < tab->nrows; i++) {
        if (!path_matches(tab, i, t))
            continue;
        path_seen = true;
        if (method_matches(&tab->rows[i], method)) {
            *ret_index = i;
            return ROUTE_FOUND;
        }
    }
    return path_seen ? ROUTE_NO_METHOD : ROUTE_NO_PATH;
}

void route_table_allow(const struct route_table *tab, const struct route_target *t, char *buf,
                       size_t len)
{
    size_t used = 0;
    bool get = false, head = false;
    if (len == 0)
        return;
    buf[0] = '\0';
    for (size_t i = 0; i < tab->nrows; i++) {
        const char *m = tab->rows[i].method;
        bool dup = false;
        if (!path_matches(tab, i, t))
            continue;
        for (size_t j = 0; j < i && !dup; j++)
            dup = path_matches(tab, j, t) && strcmp(tab->rows[j].method, m) == 0;
        get |= strcmp(m, "GET") == 0;
        head |= strcmp(m, "HEAD") == 0;
        if (!dup && used < len)
            used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "", m);
    }
    if (get && !head && used < len)
        snprintf(buf + used, len - used, ", HEAD");
}

int route_target_bind(struct route_target *t, const struct route_table *tab, size_t index,
                      struct route_error *e)
{
    const struct route_span *sp = &tab->spans[index];
    for (size_t k = 0; k < sp->nseg; k++) {
        const struct route_seg *cs = &tab->segs[sp->first + k];
        if (!cs->param)
            continue;
        struct route_kv *p = &t->param[t->nparam++];
        *p = (struct route_kv){.name = cs->s, .name_len = cs->len, .value = t->seg[k]};
        if (strlen(p->value) > HTTP_PARAM_MAX)
            return refuse(e, 400, "invalid_path", "path parameter '%.*s' is longer than %u bytes",
                          (int)cs->len, cs->s, HTTP_PARAM_MAX);
        if (!route_utf8_valid(p->value))
            return refuse(e, 400, "invalid_path", "path parameter '%.*s' is not valid UTF-8",
                          (int)cs->len, cs->s);
    }
    return 0;
}

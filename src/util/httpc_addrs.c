/*
 * httpc_addrs.c - a client's list of addresses and the choice of the
 * address of each try (httpc_int.h; the rules are written in httpc.h).
 */
#include "util/httpc_int.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "util/errbuf.h"
#include "base/banned.h"

#define EXPECTED "expected http://HOST:PORT or https://HOST:PORT"

static bool blank(char ch)
{
    return ch == ' ' || ch == '\t';
}

/* The length of u's scheme and "://" (http or https), else 0. */
static size_t scheme_len(const char *u, size_t n)
{
    if (n >= 7 && strncmp(u, "http://", 7) == 0)
        return 7;
    if (n >= 8 && strncmp(u, "https://", 8) == 0)
        return 8;
    return 0;
}

/* Whether u[0, n) is a base URL: http(s)://, a host, no space or comma. */
static bool url_ok(const char *u, size_t n)
{
    size_t s = scheme_len(u, n);
    if (!s || n == s || n >= HTTPC_URL_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (u[i] == ' ' || u[i] == '\t' || u[i] == '\r' || u[i] == '\n' || u[i] == ',')
            return false;
    return true;
}

/* The length of u's origin: scheme, "://" and authority. */
static size_t origin_len(const char *u)
{
    size_t s = scheme_len(u, strlen(u));
    const char *slash = strpbrk(u + s, "/?#");
    return slash ? (size_t)(slash - u) : strlen(u);
}

static bool same_origin(const char *a, const char *b)
{
    size_t n = origin_len(a);
    return n == origin_len(b) && strncasecmp(a, b, n) == 0;
}

int httpc_urls_check(const char *list, struct httpc_urls_fault *ret)
{
    struct httpc_urls_fault f = {.entry = list ? list : "", .why = EXPECTED, .count = 1};
    if (!list) {
        f.index = 1;
        goto bad;
    }
    for (const char *p = list; *p; p++)
        f.count += *p == ',';
    size_t n = strlen(list);
    if (n >= HTTPC_URL_MAX) {
        f.len = n;
        f.why = "the list is over 1023 bytes";
        goto bad;
    }
    if (f.count > HTTPC_ADDRS_MAX) {
        f.len = n;
        f.why = "more than 16 addresses";
        goto bad;
    }
    const char *p = list;
    for (f.index = 1; f.index <= f.count; f.index++) {
        const char *end = strchr(p, ',');
        size_t a = 0, b = end ? (size_t)(end - p) : strlen(p);
        while (a < b && blank(p[a]))
            a++;
        while (b > a && blank(p[b - 1]))
            b--;
        f.entry = p + a;
        f.len = b - a;
        if (a == b) {
            f.why = "an empty entry";
            goto bad;
        }
        while (b > a && p[b - 1] == '/')
            b--;
        if (!url_ok(p + a, b - a))
            goto bad;
        p = end ? end + 1 : p + b;
    }
    return 0;
bad:
    if (ret)
        *ret = f;
    return GPO_EINVAL;
}

const char *httpc_urls_describe(const struct httpc_urls_fault *f, char *buf, size_t len)
{
    int n = (int)(f->len > 200 ? 200 : f->len);
    if (f->count > 1)
        snprintf(buf, len, "'%.*s' (entry %zu of %zu): %s", n, f->entry, f->index, f->count,
                 f->why);
    else
        snprintf(buf, len, "'%.*s': %s", n, f->entry, f->why);
    return buf;
}

int httpc_addrs_parse(struct httpc_addrs *a, const char *list, char *err, size_t errlen)
{
    struct httpc_urls_fault f;
    if (httpc_urls_check(list, &f) != 0) {
        char text[HTTPC_URL_FAULT_MAX];
        return errbuf_set(err, errlen, GPO_EINVAL, "URL %s",
                          httpc_urls_describe(&f, text, sizeof(text)));
    }
    memset(a, 0, sizeof(*a));
    size_t o = 0;
    for (const char *p = list;; p++) {
        const char *end = strchr(p, ',');
        size_t i = 0, j = end ? (size_t)(end - p) : strlen(p);
        while (i < j && blank(p[i]))
            i++;
        while (j > i && (blank(p[j - 1]) || p[j - 1] == '/'))
            j--;
        a->off[a->ngiven++] = (uint16_t)o;
        memcpy(a->given + o, p + i, j - i);
        o += j - i;
        a->given[o++] = '\0';
        if (!end)
            break;
        p = end;
    }
    return 0;
}

size_t httpc_addrs_count(const struct httpc_addrs *a)
{
    return a->ngiven + a->nlearned;
}

const char *httpc_addrs_at(const struct httpc_addrs *a, size_t i)
{
    return i < a->ngiven ? a->given + a->off[i] : a->learned[i - a->ngiven];
}

static size_t next_of(const struct httpc_addrs *a, size_t i)
{
    return (i + 1) % httpc_addrs_count(a);
}

/*
 * The base URL a redirect to `location` makes current, into out (len
 * bytes): the location without the request's path at its end, or its
 * origin where it does not end with the path. False where it is no
 * http(s) URL, on the origin of `from` (a loop, not a leader elsewhere), or
 * http after https (the token would travel in the clear).
 */
static bool redirect_base(const char *location, const char *path, const char *from, char *out,
                          size_t len)
{
    size_t n = strlen(location), p = strlen(path);
    if (n > p && strcmp(location + n - p, path) == 0)
        n -= p;
    else
        n = origin_len(location);
    while (n > 0 && location[n - 1] == '/')
        n--;
    if (!url_ok(location, n) || n >= len || same_origin(location, from) ||
        (scheme_len(from, strlen(from)) == 8 && scheme_len(location, n) == 7))
        return false;
    memcpy(out, location, n);
    out[n] = '\0';
    return true;
}

/* Its index, adding it (in place of the oldest learned one when full). */
static size_t learn(struct httpc_addrs *a, const char *base)
{
    for (size_t i = 0; i < httpc_addrs_count(a); i++)
        if (strcmp(httpc_addrs_at(a, i), base) == 0)
            return i;
    size_t slot;
    if (a->nlearned < HTTPC_LEARNED_MAX) {
        slot = a->nlearned++;
    } else {
        slot = a->oldest;
        a->oldest = (a->oldest + 1) % HTTPC_LEARNED_MAX;
    }
    snprintf(a->learned[slot], sizeof(a->learned[slot]), "%s", base);
    return a->ngiven + slot;
}

void httpc_round_begin(struct httpc_addrs *a, struct httpc_round *r)
{
    if (a->advance)
        a->cur = next_of(a, a->cur);
    a->advance = false;
    *r = (struct httpc_round){.idx = a->cur, .kept_at = SIZE_MAX};
}

/* The two answers another address may do better than. */
static bool is_redirect(const struct httpc_try *t)
{
    return (t->status == 307 || t->status == 308) && t->location;
}

static bool is_follower_refusal(const struct httpc_try *t)
{
    return t->status == 503 && t->follower;
}

bool httpc_round_again(const struct httpc_addrs *a, const struct httpc_round *r,
                       const struct httpc_try *t, const char *path)
{
    char base[HTTPC_URL_MAX];
    if (r->no_more)
        return false;
    switch (t->kind) {
    case HTTPC_TRY_UNSENT:
        return r->tried + 1 < httpc_addrs_count(a);
    case HTTPC_TRY_BROKEN:
        return false;
    case HTTPC_TRY_ANSWER:
    default:
        if (is_redirect(t) && r->hops < HTTPC_HOPS_MAX &&
            redirect_base(t->location, path, httpc_addrs_at(a, r->idx), base, sizeof(base)))
            return true;
        return is_follower_refusal(t) && r->tried + 1 < httpc_addrs_count(a);
    }
}

bool httpc_round_step(struct httpc_addrs *a, struct httpc_round *r, const struct httpc_try *t,
                      const char *path)
{
    if (!httpc_round_again(a, r, t, path)) {
        if (t->kind == HTTPC_TRY_BROKEN) {
            a->cur = r->idx;
            a->advance = true;
        } else if (t->kind == HTTPC_TRY_ANSWER) {
            a->cur = r->idx;
            r->kept_at = SIZE_MAX;
        } else if (r->kept_at != SIZE_MAX) {
            a->cur = r->kept_at; /* the last answer, not the last refusal */
        }
        return false;
    }
    char base[HTTPC_URL_MAX];
    if (t->kind == HTTPC_TRY_ANSWER)
        r->kept_at = r->idx;
    if (t->kind == HTTPC_TRY_ANSWER && is_redirect(t) &&
        redirect_base(t->location, path, httpc_addrs_at(a, r->idx), base, sizeof(base))) {
        r->idx = learn(a, base);
        r->hops++;
        return true;
    }
    r->tried++;
    r->idx = next_of(a, r->idx);
    return true;
}

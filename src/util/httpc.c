/*
 * httpc.c - the HTTP client over libcurl (httpc.h).
 *
 * One easy handle per client, kept between requests so that its connection
 * is reused (the agent's heartbeats and reports then cost no handshake).
 * curl_global_init runs once, under pthread_once: libcurl asks for it before
 * any other call and it is not safe to race.
 *
 * A request is a round of tries (httpc_int.h picks each one's address); the
 * handle is set up afresh for each try, and an answer passed over (a
 * follower's) is kept, in case it turns out to be the last answer.
 */
#include "util/httpc.h"
#include "util/httpc_int.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/errbuf.h"
#include "base/banned.h"

#define CONNECT_TIMEOUT_MS 5000L

struct httpc {
    CURL *curl;
    struct httpc_addrs addrs;
    char auth[HTTPC_TOKEN_MAX + 32]; /* "Authorization: Bearer ..." or "" */
    char extra[HTTPC_HEADER_MAX];    /* "Name: value" or "" */
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc = CURLE_FAILED_INIT;

static void global_init(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int httpc_set_token(struct httpc *c, const char *token)
{
    if (!c)
        return GPO_EINVAL;
    if (!token) {
        c->auth[0] = '\0';
        return 0;
    }
    if (strlen(token) >= HTTPC_TOKEN_MAX || strpbrk(token, "\r\n"))
        return GPO_EINVAL;
    snprintf(c->auth, sizeof(c->auth), "Authorization: Bearer %s", token);
    return 0;
}

int httpc_set_header(struct httpc *c, const char *name, const char *value)
{
    if (!c)
        return GPO_EINVAL;
    if (!name) {
        c->extra[0] = '\0';
        return 0;
    }
    bool token = name[0] != '\0';
    for (const char *p = name; *p && token; p++)
        token = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                strchr("!#$%&'*+-.^_`|~", *p);
    if (!token || !value || strpbrk(value, "\r\n"))
        return GPO_EINVAL;
    int n = snprintf(c->extra, sizeof(c->extra), "%s: %s", name, value);
    if (n < 0 || (size_t)n >= sizeof(c->extra)) {
        c->extra[0] = '\0';
        return GPO_EINVAL;
    }
    return 0;
}

int httpc_new(const char *base_url, const char *token, struct httpc **ret, char *err, size_t errlen)
{
    if (!base_url || !ret)
        return errbuf_set(err, errlen, GPO_EINVAL, "httpc_new: NULL argument");
    if (httpc_urls_check(base_url, NULL) != 0) {
        struct httpc_addrs probe; /* for its message */
        return httpc_addrs_parse(&probe, base_url, err, errlen);
    }
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK)
        return errbuf_set(err, errlen, GPO_ENOMEM, "curl_global_init: %s",
                          curl_easy_strerror(global_rc));
    struct httpc *c = calloc(1, sizeof(*c));
    if (!c)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    httpc_addrs_parse(&c->addrs, base_url, NULL, 0);
    if (httpc_set_token(c, token)) {
        free(c);
        return errbuf_set(err, errlen, GPO_EINVAL, "token: too long, or a CR or LF in it");
    }
    c->curl = curl_easy_init();
    if (!c->curl) {
        free(c);
        return errbuf_set(err, errlen, GPO_ENOMEM, "curl_easy_init failed");
    }
    *ret = c;
    return 0;
}

void httpc_free(struct httpc *c)
{
    if (!c)
        return;
    if (c->curl)
        curl_easy_cleanup(c->curl);
    free(c);
}

const char *httpc_url(const struct httpc *c)
{
    return c ? httpc_addrs_at(&c->addrs, c->addrs.cur) : "";
}

void httpc_response_release(struct httpc_response *r)
{
    if (!r)
        return;
    free(r->body);
    memset(r, 0, sizeof(*r));
}

/* The body collected by httpc_request. */
struct sink {
    char *buf;
    size_t len, cap;
    bool over;
};

static size_t sink_write(char *data, size_t size, size_t nmemb, void *ctx)
{
    struct sink *s = ctx;
    size_t n = size * nmemb;
    if (s->len + n > HTTPC_BODY_MAX) {
        s->over = true;
        return 0;
    }
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 4096;
        while (cap < s->len + n + 1)
            cap *= 2;
        char *b = realloc(s->buf, cap);
        if (!b)
            return 0;
        s->buf = b;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, data, n);
    s->len += n;
    s->buf[s->len] = '\0';
    return n;
}

static int map_curl(CURLcode rc)
{
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        return GPO_ECONNREFUSED;
    case CURLE_OPERATION_TIMEDOUT:
        return GPO_ETIMEDOUT;
    case CURLE_OUT_OF_MEMORY:
        return GPO_ENOMEM;
    case CURLE_ABORTED_BY_CALLBACK:
        return GPO_ECANCELED;
    default:
        return GPO_EIO;
    }
}

/* Sets what every request shares; returns the header list to free, or NULL
 * (with *ok false when out of memory). */
static struct curl_slist *prepare(struct httpc *c, const char *url, long timeout_ms, bool json,
                                  bool *ok)
{
    CURL *h = c->curl;
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 0L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    struct curl_slist *hdr = NULL, *t;
    *ok = true;
    if (c->auth[0]) {
        if (!(t = curl_slist_append(hdr, c->auth)))
            goto oom;
        hdr = t;
    }
    if (c->extra[0]) {
        if (!(t = curl_slist_append(hdr, c->extra)))
            goto oom;
        hdr = t;
    }
    if (json) {
        if (!(t = curl_slist_append(hdr, "Content-Type: application/json")))
            goto oom;
        hdr = t;
    }
    /* No "Expect: 100-continue" round trip before a body. */
    if (!(t = curl_slist_append(hdr, "Expect:")))
        goto oom;
    hdr = t;
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    return hdr;
oom:
    curl_slist_free_all(hdr);
    *ok = false;
    return NULL;
}

/* The answer's status and, where they matter, its Location and role. */
static void answer_of(CURL *h, struct httpc_try *t)
{
    *t = (struct httpc_try){.kind = HTTPC_TRY_ANSWER};
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &t->status);
    /* The header as sent (CURLINFO_REDIRECT_URL is known only once the
     * transfer ends, and a stream decides at its first byte); a relative
     * one is on the same origin, never followed. */
    struct curl_header *loc = NULL, *role = NULL;
    if ((t->status == 307 || t->status == 308) &&
        curl_easy_header(h, "Location", 0, CURLH_HEADER, -1, &loc) == CURLHE_OK &&
        (strncasecmp(loc->value, "http://", 7) == 0 || strncasecmp(loc->value, "https://", 8) == 0))
        t->location = loc->value;
    if (t->status >= 300 &&
        curl_easy_header(h, "X-Gpuorch-Role", 0, CURLH_HEADER, -1, &role) == CURLHE_OK)
        t->follower = strcasecmp(role->value, "follower") == 0;
}

/* What a try that ended with rc came to; answered: a status line came. */
static void try_of(CURL *h, CURLcode rc, bool answered, struct httpc_try *t)
{
    if (rc == CURLE_OK || answered) {
        answer_of(h, t);
        return;
    }
    long sent = 0; /* bytes of request headers sent: none means no connection */
    curl_easy_getinfo(h, CURLINFO_REQUEST_SIZE, &sent);
    *t = (struct httpc_try){.kind = sent == 0 ? HTTPC_TRY_UNSENT : HTTPC_TRY_BROKEN};
}

/* One request's fixed parts and its state across tries. */
struct call {
    const char *method, *path, *body;
    long timeout_ms;
    struct httpc_round round;
    curl_off_t spent_us; /* by the tries so far */
    char url[HTTPC_URL_MAX + 2048];
};

static int call_begin(struct httpc *c, struct call *k, char *err, size_t errlen)
{
    if (strlen(k->path) >= sizeof(k->url) - HTTPC_URL_MAX)
        return errbuf_set(err, errlen, GPO_EINVAL, "%s %.200s: URL too long", k->method, k->path);
    httpc_round_begin(&c->addrs, &k->round);
    return 0;
}

/* The handle set up for the next try: its URL, headers and time left.
 * Returns the header list to free after the try; NULL with *ok false when
 * out of memory. */
static struct curl_slist *call_prepare(struct httpc *c, struct call *k, bool *ok)
{
    snprintf(k->url, sizeof(k->url), "%s%s", httpc_addrs_at(&c->addrs, k->round.idx), k->path);
    long left = k->timeout_ms - (long)(k->spent_us / 1000);
    return prepare(c, k->url, k->timeout_ms > 0 ? (left > 0 ? left : 1) : 0, k->body != NULL, ok);
}

/* After a try: whether to try again (httpc_round_step), with the time spent. */
static bool call_step(struct httpc *c, struct call *k, const struct httpc_try *t)
{
    curl_off_t us = 0;
    curl_easy_getinfo(c->curl, CURLINFO_TOTAL_TIME_T, &us);
    k->spent_us += us;
    k->round.no_more = k->timeout_ms > 0 && k->spent_us / 1000 >= k->timeout_ms;
    return httpc_round_step(&c->addrs, &k->round, t, k->path);
}

/* The error of a request that got no answer, naming the last URL tried. */
static int call_error(const struct call *k, CURLcode rc, char *err, size_t errlen)
{
    if (k->round.tried > 0)
        return errbuf_set(err, errlen, map_curl(rc), "%s %s: %s (after %zu other address%s)",
                          k->method, k->url, curl_easy_strerror(rc), k->round.tried,
                          k->round.tried == 1 ? "" : "es");
    return errbuf_set(err, errlen, map_curl(rc), "%s %s: %s", k->method, k->url,
                      curl_easy_strerror(rc));
}

/* Runs the try set up on c's handle; frees its header list. */
static CURLcode perform(struct httpc *c, struct curl_slist *hdr)
{
    CURLcode rc = curl_easy_perform(c->curl);
    curl_slist_free_all(hdr);
    curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, NULL);
    return rc;
}

/* After a try passed over: its answer's body kept, in case it is the last
 * answer (the last one only), else dropped; *s is empty again. */
static void pass_over(struct sink *s, const struct httpc_try *t, struct sink *kept,
                      struct httpc_try *kept_try)
{
    if (t->kind == HTTPC_TRY_ANSWER) {
        free(kept->buf);
        *kept = *s;
        *kept_try = *t;
        kept_try->location = NULL; /* curl's, gone at the next try */
    } else {
        free(s->buf);
    }
    *s = (struct sink){0};
}

int httpc_request(struct httpc *c, const char *method, const char *path, const char *body,
                  size_t len, long timeout_ms, struct httpc_response *ret, char *err, size_t errlen)
{
    if (!c || !method || !path || path[0] != '/' || !ret || (len && !body))
        return errbuf_set(err, errlen, GPO_EINVAL, "httpc_request: bad argument");
    struct call k = {.method = method, .path = path, .body = body, .timeout_ms = timeout_ms};
    int rc = call_begin(c, &k, err, errlen);
    if (rc)
        return rc;
    CURL *h = c->curl;
    struct sink s = {0}, kept = {0};
    struct httpc_try t, kept_try = {0};
    CURLcode crc;
    for (;;) {
        bool ok;
        struct curl_slist *hdr = call_prepare(c, &k, &ok);
        if (!ok) {
            free(kept.buf);
            return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
        }
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
        if (strcmp(method, "HEAD") == 0)
            curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
        if (body || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0) {
            /* A POST without a body still says Content-Length: 0. */
            curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? body : "");
            curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        }
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink_write);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
        crc = perform(c, hdr);
        /* An answer too big, or no memory for it, is still this address's. */
        try_of(h, crc, s.over || crc == CURLE_WRITE_ERROR, &t);
        if (!call_step(c, &k, &t))
            break;
        pass_over(&s, &t, &kept, &kept_try);
    }
    if (t.kind == HTTPC_TRY_UNSENT && k.round.kept_at != SIZE_MAX) {
        free(s.buf);
        s = kept;
        t = kept_try;
        crc = CURLE_OK;
    } else {
        free(kept.buf);
    }
    if (crc != CURLE_OK) {
        free(s.buf);
        if (s.over)
            return errbuf_set(err, errlen, GPO_E2BIG, "%s %s: answer over %zu bytes", method, k.url,
                              HTTPC_BODY_MAX);
        return call_error(&k, crc, err, errlen);
    }
    if (!s.buf && !(s.buf = calloc(1, 1)))
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    ret->status = t.status;
    ret->body = s.buf;
    ret->len = s.len;
    ret->follower = t.follower;
    return 0;
}

struct stream {
    httpc_data_fn fn;
    void *ctx;
    bool stopped;
    CURL *h;
    long *status; /* set at the first piece of the body passed on */
    /* Whether this try's answer is passed over (decided at its first byte),
     * and what is needed to decide it. */
    bool decided, skip;
    struct sink *kept; /* a body passed over */
    const struct httpc *c;
    const struct call *k;
};

static size_t stream_write(char *data, size_t size, size_t nmemb, void *ctx)
{
    struct stream *st = ctx;
    size_t n = size * nmemb;
    if (!st->decided) {
        struct httpc_try t;
        answer_of(st->h, &t);
        st->decided = true;
        st->skip = httpc_round_again(&st->c->addrs, &st->k->round, &t, st->k->path);
    }
    if (st->skip)
        return sink_write(data, size, nmemb, st->kept);
    if (st->status && !*st->status)
        curl_easy_getinfo(st->h, CURLINFO_RESPONSE_CODE, st->status);
    if (n && st->fn(data, n, st->ctx)) {
        st->stopped = true;
        return 0;
    }
    return n;
}

static int stream_progress(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                           curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    struct stream *st = ctx;
    if (st->fn(NULL, 0, st->ctx)) {
        st->stopped = true;
        return 1;
    }
    return 0;
}

int httpc_stream_body(struct httpc *c, const char *method, const char *path, const char *body,
                      size_t len, long timeout_ms, httpc_data_fn on_data, void *ctx,
                      long *ret_status, char *err, size_t errlen)
{
    if (!c || !method || !path || path[0] != '/' || !on_data || (len && !body))
        return errbuf_set(err, errlen, GPO_EINVAL, "httpc_stream: bad argument");
    struct call k = {.method = method, .path = path, .body = body, .timeout_ms = timeout_ms};
    int rc = call_begin(c, &k, err, errlen);
    if (rc)
        return rc;
    CURL *h = c->curl;
    long status = 0;
    struct sink skipped = {0}, kept = {0};
    struct httpc_try t, kept_try = {0};
    struct stream st;
    CURLcode crc;
    if (ret_status)
        *ret_status = 0;
    for (;;) {
        bool ok;
        struct curl_slist *hdr = call_prepare(c, &k, &ok);
        if (!ok) {
            free(kept.buf);
            return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
        }
        status = 0;
        st = (struct stream){.fn = on_data,
                             .ctx = ctx,
                             .h = h,
                             .status = ret_status ? ret_status : &status,
                             .kept = &skipped,
                             .c = c,
                             .k = &k};
        if (body) {
            curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
            curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
            curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        } else {
            curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
        }
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, stream_write);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &st);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, stream_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, &st);
        crc = perform(c, hdr);
        if (st.stopped)
            k.round.no_more = true;
        try_of(h, crc, st.decided, &t);
        if (!call_step(c, &k, &t))
            break;
        pass_over(&skipped, &t, &kept, &kept_try);
    }
    /* The outcome: this try, or the last answer passed over (every address a
     * follower or down); its body still to pass on where it was dropped. */
    struct sink *late = st.skip ? &skipped : NULL;
    if (!st.stopped && t.kind == HTTPC_TRY_UNSENT && k.round.kept_at != SIZE_MAX) {
        late = &kept;
        status = kept_try.status;
        crc = CURLE_OK;
    } else if (st.skip) {
        status = t.status; /* the time ran out as this answer was passed over */
    } else {
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    }
    if (ret_status)
        *ret_status = status;
    if (late && late->len && !st.stopped && crc == CURLE_OK && on_data(late->buf, late->len, ctx))
        st.stopped = true;
    free(skipped.buf);
    free(kept.buf);
    if (st.stopped)
        return errbuf_set(err, errlen, GPO_ECANCELED, "%s %s: stopped", method, k.url);
    if (crc != CURLE_OK)
        return call_error(&k, crc, err, errlen);
    return 0;
}

int httpc_stream(struct httpc *c, const char *path, long timeout_ms, httpc_data_fn on_data,
                 void *ctx, long *ret_status, char *err, size_t errlen)
{
    return httpc_stream_body(c, "GET", path, NULL, 0, timeout_ms, on_data, ctx, ret_status, err,
                             errlen);
}

int httpc_escape(const char *s, char *buf, size_t len)
{
    if (!s || !buf || !len)
        return GPO_EINVAL;
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                     (*p >= '0' && *p <= '9') || strchr("-._~", *p);
        size_t need = plain ? 1 : 3;
        if (o + need >= len) {
            buf[0] = '\0';
            return GPO_E2BIG;
        }
        if (plain) {
            buf[o++] = (char)*p;
        } else {
            buf[o++] = '%';
            buf[o++] = hex[*p >> 4];
            buf[o++] = hex[*p & 15];
        }
    }
    buf[o] = '\0';
    return 0;
}

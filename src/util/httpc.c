/*
 * httpc.c - the HTTP client over libcurl (httpc.h).
 *
 * One easy handle per client, kept between requests so that its connection
 * is reused (the agent's heartbeats and reports then cost no handshake).
 * curl_global_init runs once, under pthread_once: libcurl asks for it before
 * any other call and it is not safe to race.
 */
#include "util/httpc.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/errbuf.h"
#include "base/banned.h"

#define CONNECT_TIMEOUT_MS 5000L

struct httpc {
    CURL *curl;
    char base[HTTPC_URL_MAX];
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
    size_t n = strlen(base_url);
    if ((strncmp(base_url, "http://", 7) != 0 && strncmp(base_url, "https://", 8) != 0) ||
        n >= HTTPC_URL_MAX || strpbrk(base_url, " \r\n"))
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "URL '%.200s': expected http://HOST:PORT or https://HOST:PORT", base_url);
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK)
        return errbuf_set(err, errlen, GPO_ENOMEM, "curl_global_init: %s",
                          curl_easy_strerror(global_rc));
    struct httpc *c = calloc(1, sizeof(*c));
    if (!c)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    while (n > 0 && base_url[n - 1] == '/')
        n--;
    memcpy(c->base, base_url, n);
    c->base[n] = '\0';
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
static struct curl_slist *prepare(struct httpc *c, const char *path, long timeout_ms, char *url,
                                  size_t urllen, bool json, bool *ok)
{
    CURL *h = c->curl;
    curl_easy_reset(h);
    snprintf(url, urllen, "%s%s", c->base, path);
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

int httpc_request(struct httpc *c, const char *method, const char *path, const char *body,
                  size_t len, long timeout_ms, struct httpc_response *ret, char *err, size_t errlen)
{
    if (!c || !method || !path || path[0] != '/' || !ret || (len && !body))
        return errbuf_set(err, errlen, GPO_EINVAL, "httpc_request: bad argument");
    char url[HTTPC_URL_MAX + 2048];
    if (strlen(c->base) + strlen(path) >= sizeof(url))
        return errbuf_set(err, errlen, GPO_EINVAL, "%s %.200s: URL too long", method, path);
    bool ok;
    struct curl_slist *hdr = prepare(c, path, timeout_ms, url, sizeof(url), body != NULL, &ok);
    if (!ok)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    CURL *h = c->curl;
    struct sink s = {0};
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
    CURLcode rc = curl_easy_perform(h);
    curl_slist_free_all(hdr);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    if (rc != CURLE_OK) {
        free(s.buf);
        if (s.over)
            return errbuf_set(err, errlen, GPO_E2BIG, "%s %s: answer over %zu bytes", method, url,
                              HTTPC_BODY_MAX);
        return errbuf_set(err, errlen, map_curl(rc), "%s %s: %s", method, url,
                          curl_easy_strerror(rc));
    }
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    if (!s.buf && !(s.buf = calloc(1, 1)))
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    ret->status = status;
    ret->body = s.buf;
    ret->len = s.len;
    return 0;
}

struct stream {
    httpc_data_fn fn;
    void *ctx;
    bool stopped;
    CURL *h;
    long *status; /* set at the first piece of the body */
};

static size_t stream_write(char *data, size_t size, size_t nmemb, void *ctx)
{
    struct stream *st = ctx;
    size_t n = size * nmemb;
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
    char url[HTTPC_URL_MAX + 2048];
    if (strlen(c->base) + strlen(path) >= sizeof(url))
        return errbuf_set(err, errlen, GPO_EINVAL, "%s %.200s: URL too long", method, path);
    bool ok;
    struct curl_slist *hdr = prepare(c, path, timeout_ms, url, sizeof(url), body != NULL, &ok);
    if (!ok)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    CURL *h = c->curl;
    long status = 0;
    struct stream st = {on_data, ctx, false, c->curl, ret_status ? ret_status : &status};
    if (ret_status)
        *ret_status = 0;
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
    CURLcode rc = curl_easy_perform(h);
    curl_slist_free_all(hdr);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    if (ret_status)
        *ret_status = status;
    if (st.stopped)
        return errbuf_set(err, errlen, GPO_ECANCELED, "%s %s: stopped", method, url);
    if (rc != CURLE_OK)
        return errbuf_set(err, errlen, map_curl(rc), "%s %s: %s", method, url,
                          curl_easy_strerror(rc));
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

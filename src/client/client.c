/*
 * client.c - the client itself (client.h): its connection, the generic call
 * with the API's error as one line, paths put together with their values
 * escaped (internal.h), and the calls about who is asking.
 */
#include "client/client.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"
#include "util/errbuf.h"
#include "util/jsonv.h"
#include "base/banned.h"

#define BODY_LINE_SHOWN 200 /* bytes of a non-JSON error body's first line */

int client_init(struct client *c, const char *url, const char *token, char *err, size_t errlen)
{
    *c = (struct client){0};
    if (!url || strlen(url) >= sizeof(c->url))
        return errbuf_set(err, errlen, GPO_EINVAL, "the server's URL is too long");
    snprintf(c->url, sizeof(c->url), "%s", url);
    return httpc_new(url, token, &c->http, err, errlen);
}

void client_release(struct client *c)
{
    if (!c)
        return;
    httpc_free(c->http);
    c->http = NULL;
}

/* Copies text into out as one line: control characters become spaces. */
static void one_line(const char *text, size_t len, char *out, size_t outlen)
{
    size_t n = len < outlen - 1 ? len : outlen - 1;
    n = jsonv_utf8_cut(text, n);
    for (size_t i = 0; i < n; i++)
        out[i] = (char)((unsigned char)text[i] < 0x20 || text[i] == 0x7f ? ' ' : text[i]);
    out[n] = '\0';
}

int client_api_error(long status, const char *body, size_t len, char *err, size_t errlen)
{
    json_t *o = body && len ? json_loadb(body, len, 0, NULL) : NULL;
    json_t *e = json_object_get(o, "error");
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    char line[CLIENT_ERR_MAX];
    if (code && msg) {
        one_line(msg, strlen(msg), line, sizeof(line));
        errbuf_set(err, errlen, GPO_EAPI, "%ld %s: %s", status, code, line);
    } else if (body && len) {
        const char *nl = memchr(body, '\n', len);
        one_line(body, nl ? (size_t)(nl - body) : len, line, BODY_LINE_SHOWN + 1);
        errbuf_set(err, errlen, GPO_EAPI, "%ld: %s", status, line);
    } else {
        errbuf_set(err, errlen, GPO_EAPI, "%ld: (an empty answer)", status);
    }
    json_decref(o);
    return GPO_EAPI;
}

/* A follower's answer: every controller of the list was a follower or
 * down (util/httpc.h). Names the one that answered; its "error" is a string. */
static int follower_error(const struct client *c, const struct httpc_response *r, char *err,
                          size_t errlen)
{
    json_t *o = r->len ? json_loadb(r->body, r->len, 0, NULL) : NULL;
    const char *msg = json_string_value(json_object_get(o, "error"));
    char line[CLIENT_ERR_MAX];
    one_line(msg ? msg : "(no message)", strlen(msg ? msg : "(no message)"), line, 300);
    errbuf_set(err, errlen, GPO_EAPI, "%ld from %s, a follower: %s%s", r->status,
               httpc_url(c->http), line,
               strchr(c->url, ',') ? " (every controller in the list is a follower or down)" : "");
    json_decref(o);
    return GPO_EAPI;
}

int client_call(struct client *c, const char *method, const char *path, const json_t *body,
                json_t **ret, char *err, size_t errlen)
{
    char *text = NULL, herr[CLIENT_ERR_MAX];
    c->status = 0;
    if (body && !(text = json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(15))))
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    struct httpc_response r = {0};
    int rc = httpc_request(c->http, method, path, text, text ? strlen(text) : 0,
                           CLIENT_CALL_TIMEOUT_MS, &r, herr, sizeof(herr));
    free(text);
    if (rc == GPO_ENOMEM)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    if (rc)
        return errbuf_set(err, errlen, GPO_ECONNREFUSED, "no answer: %s", herr);
    json_t *v = NULL;
    c->status = r.status;
    if (r.follower) {
        rc = follower_error(c, &r, err, errlen);
    } else if (r.status < 200 || r.status > 299) {
        rc = client_api_error(r.status, r.body, r.len, err, errlen);
    } else if (r.len) {
        json_error_t je;
        if (!(v = json_loadb(r.body, r.len, 0, &je)))
            rc = errbuf_set(err, errlen, GPO_EAPI, "%ld: the answer is not JSON: %s", r.status,
                            je.text);
    }
    httpc_response_release(&r);
    if (rc)
        return rc;
    if (ret)
        *ret = v;
    else
        json_decref(v);
    return 0;
}

/* ---- paths ------------------------------------------------------------------ */

static void append(struct client_path *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void append(struct client_path *p, const char *fmt, ...)
{
    if (p->full)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(p->buf + p->len, sizeof(p->buf) - p->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(p->buf) - p->len)
        p->full = true;
    else
        p->len += (size_t)n;
}

void client_path_init(struct client_path *p, const char *prefix)
{
    *p = (struct client_path){0};
    client_path_raw(p, prefix);
}

void client_path_raw(struct client_path *p, const char *text)
{
    append(p, "%s", text);
    p->query = p->query || strchr(text, '?') != NULL;
}

/* Appends `value` percent-encoded. */
static void append_escaped(struct client_path *p, const char *value)
{
    if (p->full)
        return;
    if (httpc_escape(value, p->buf + p->len, sizeof(p->buf) - p->len) != 0) {
        p->full = true;
        return;
    }
    p->len += strlen(p->buf + p->len);
}

void client_path_segment(struct client_path *p, const char *segment)
{
    append(p, "/");
    append_escaped(p, segment);
}

void client_path_param(struct client_path *p, const char *key, const char *value)
{
    if (!value)
        return;
    append(p, "%c%s=", p->query ? '&' : '?', key);
    p->query = true;
    append_escaped(p, value);
}

const char *client_path_done(struct client_path *p, int *ret_rc, char *err, size_t errlen)
{
    if (!p->full)
        return p->buf;
    *ret_rc = errbuf_set(err, errlen, GPO_ENAMETOOLONG,
                         "a name or value is too long for the "
                         "request's path");
    return NULL;
}

/* ---- who is asking --------------------------------------------------------------- */

int client_whoami(struct client *c, json_t **ret, char *err, size_t errlen)
{
    return client_call(c, "GET", "/v1/whoami", NULL, ret, err, errlen);
}

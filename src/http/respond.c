/*
 * respond.c - building answers (any thread: they touch only the request's
 * headers), storing them on the request, and the handler's answering API:
 * add_header, respond_* and http_request_error. http.c queues them.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>
#include <microhttpd.h>

#include "http/http.h"
#include "http/internal.h"
#include "http/route.h"
#include "base/banned.h"

#define MSG_MAX 512

bool http_status_ok(unsigned status)
{
    return status >= 100 && status <= 599;
}

/* A response over `data`; with MHD_RESPMEM_MUST_FREE the data is ours to
 * free() and is freed here on failure. */
static int build_bytes(struct http_request *req, const char *ctype, const void *data, size_t len,
                       enum MHD_ResponseMemoryMode mode, struct MHD_Response **ret)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)data, mode);
    if (!r) {
        if (mode == MHD_RESPMEM_MUST_FREE)
            free((void *)data);
        return GPO_ENOMEM;
    }
    bool ok = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype) == MHD_YES;
    for (size_t i = 0; ok && i < req->nhdrs; i++)
        ok = MHD_add_response_header(r, req->hdrs[i].name, req->hdrs[i].value) == MHD_YES;
    if (!ok) {
        MHD_destroy_response(r);
        return GPO_ENOMEM;
    }
    *ret = r;
    return 0;
}

int http_build_json(struct http_request *req, json_t *body, struct MHD_Response **ret)
{
    char *s = NULL;
    if (body) {
        s = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15));
        json_decref(body);
        if (!s)
            return GPO_ENOMEM;
    }
    return build_bytes(req, "application/json", s ? s : "", s ? strlen(s) : 0,
                       s ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT, ret);
}

int http_build_error(struct http_request *req, unsigned status, const char *code, const char *fmt,
                     va_list ap, struct MHD_Response **ret)
{
    char msg[MSG_MAX];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    route_utf8_sanitize(msg);
    json_t *o = json_pack("{s:{s:i,s:s,s:s}}", "error", "status", (int)status, "code", code,
                          "message", msg);
    if (!o)
        return GPO_ENOMEM;
    return http_build_json(req, o, ret);
}

void http_set_shared(struct http_request *req, struct MHD_Response *r, unsigned status)
{
    req->resp = r;
    req->resp_shared = true;
    req->status = status;
}

void http_set_resp(struct http_request *req, struct MHD_Response *r, unsigned status)
{
    if (!r)
        http_set_shared(req, req->srv->resp_oom, 500);
    else
        req->resp = r, req->resp_shared = false, req->status = status;
}

void http_drop_resp(struct http_request *req)
{
    if (req->resp && !req->resp_shared)
        MHD_destroy_response(req->resp);
    req->resp = NULL;
}

int http_response_headers(struct http_request *req, struct MHD_Response *r, const char *ctype)
{
    bool ok = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype) == MHD_YES;
    for (size_t i = 0; ok && i < req->nhdrs; i++)
        ok = MHD_add_response_header(r, req->hdrs[i].name, req->hdrs[i].value) == MHD_YES;
    return ok ? 0 : GPO_ENOMEM;
}

bool http_can_answer(const struct http_request *req)
{
    return req->state == REQ_RECEIVING && !req->resp && req->conn;
}

static int answer(struct http_request *req, int rc, struct MHD_Response *r, unsigned status)
{
    if (rc == 0)
        http_set_resp(req, r, status);
    return rc;
}

int http_request_add_header(struct http_request *req, const char *name, const char *value)
{
    static const char *const reserved[] = {"Content-Type", "Content-Length", "Transfer-Encoding",
                                           "Connection"};
    if (!name || !value || !name[0] || strpbrk(value, "\r\n") ||
        req->nhdrs == HTTP_MAX_RESP_HEADERS)
        return GPO_EINVAL;
    for (const char *p = name; *p; p++)
        if (!route_is_tchar(*p))
            return GPO_EINVAL;
    for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
        if (strcasecmp(name, reserved[i]) == 0)
            return GPO_EINVAL;
    if (!req->suspend_held && !http_can_answer(req))
        return GPO_ESTATE;
    struct hdr *h = &req->hdrs[req->nhdrs];
    h->name = strdup(name);
    h->value = strdup(value);
    if (!h->name || !h->value) {
        free(h->name);
        free(h->value);
        return GPO_ENOMEM;
    }
    req->nhdrs++;
    return 0;
}

int http_request_respond_json(struct http_request *req, unsigned status, json_t *body)
{
    struct MHD_Response *r = NULL;
    if (!http_can_answer(req) || !http_status_ok(status)) {
        json_decref(body);
        return http_status_ok(status) ? GPO_ESTATE : GPO_EINVAL;
    }
    int rc = http_build_json(req, body, &r);
    return answer(req, rc, r, status);
}

static int respond_mem(struct http_request *req, unsigned status, const char *ctype,
                       const void *data, size_t len, enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = NULL;
    if (!http_can_answer(req))
        return GPO_ESTATE;
    if (!http_status_ok(status) || !ctype || !ctype[0] || strpbrk(ctype, "\r\n") || (len && !data))
        return GPO_EINVAL;
    if (len == 0)
        data = "", mode = MHD_RESPMEM_PERSISTENT;
    if (mode == MHD_RESPMEM_MUST_FREE) {
        void *copy = malloc(len);
        if (!copy)
            return GPO_ENOMEM;
        data = memcpy(copy, data, len);
        // cppcheck-suppress memleak ; data holds copy: build_bytes takes it (MUST_FREE)
    }
    int rc = build_bytes(req, ctype, data, len, mode, &r);
    return answer(req, rc, r, status);
}

int http_request_respond_bytes(struct http_request *req, unsigned status, const char *content_type,
                               const void *data, size_t len)
{
    return respond_mem(req, status, content_type, data, len, MHD_RESPMEM_MUST_FREE);
}

int http_request_respond_static(struct http_request *req, unsigned status, const char *content_type,
                                const void *data, size_t len)
{
    return respond_mem(req, status, content_type, data, len, MHD_RESPMEM_PERSISTENT);
}

int http_request_error(struct http_request *req, unsigned status, const char *code, const char *fmt,
                       ...)
{
    struct MHD_Response *r = NULL;
    va_list ap;
    if (!http_can_answer(req))
        return GPO_ESTATE;
    if (!http_status_ok(status) || !code || !fmt)
        return GPO_EINVAL;
    va_start(ap, fmt);
    int rc = http_build_error(req, status, code, fmt, ap, &r);
    va_end(ap);
    return answer(req, rc, r, status);
}

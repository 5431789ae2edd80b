/*
 * http.h - the controller's HTTP layer: a route table, request access and
 * JSON responses over libmicrohttpd (the only module that sees it).
 *
 * Threads. One polling thread (epoll) serves every connection; a second,
 * the timer thread, fires the deadlines of suspended requests; without TLS a
 * third, the accept gate, accepts connections and judges their first
 * requests' framing before handing them to the first. A handler runs
 * on the polling thread and must not block: it either answers at once or
 * SUSPENDS the request, which then holds no thread, and some other thread
 * (the store's writer after a commit, the scheduling loop when an agent's
 * assignments change, the timer) COMPLETES it later.
 *
 * Dispatch, in this order, for every request:
 *   0. the message framing (RFC 9112 section 6, the rules in framing.h): a
 *      Content-Length that is not digits, given twice (equal or not) or over
 *      64 bits, Transfer-Encoding beside it, in HTTP/1.0 or ending in a coding
 *      other than chunked, a header name that is not a token: one 400
 *      invalid_framing (413 body_too_large, 501 not_implemented) with
 *      Connection: close, and the connection closed. Plain-HTTP connections
 *      are accepted by the library's own gate, which checks a connection's
 *      first requests before libmicrohttpd reads them (docs/api.md, "HTTP
 *      framing", says why);
 *   1. the path is split at '/' and each segment percent-decoded; a bad
 *      escape or %00 is 400 invalid_path; the query likewise (400
 *      invalid_query); HEAD is served by the GET route;
 *   1a. the admit hook, when there is one: false means it answered (a
 *      controller that does not lead answers all but its health here);
 *   2. no route pattern matches the path: 404 not_found; a pattern matches
 *      but not the method: 405 method_not_allowed with an Allow header;
 *   3. the server is stopping: 503 unavailable;
 *   4. unless the route is HTTP_ROUTE_PUBLIC, the authorize hook;
 *   5. path parameters longer than HTTP_PARAM_MAX or not UTF-8: 400
 *      invalid_path;
 *   6. the body (read only after 1-5 passed, so an unauthorized client
 *      cannot make the server buffer anything): over the body limit 413
 *      body_too_large (at once when Content-Length says so, which closes the
 *      connection unread; a chunked body is discarded, not buffered, and
 *      answered when it ends); a body on a route without a body flag (GET
 *      and DELETE routes included) 400 body_not_allowed; on a
 *      HTTP_ROUTE_JSON_BODY route the body must be one JSON object: 400
 *      empty_body, invalid_utf8, duplicate_key, invalid_json (naming line and
 *      column) or not_an_object. Content-Type is not checked;
 *   7. the handler.
 * Every error answer has the body
 *     {"error": {"status": 400, "code": "invalid_json", "message": "..."}}
 * and Content-Type: application/json.
 */
#ifndef GPUORCH_HTTP_HTTP_H
#define GPUORCH_HTTP_HTTP_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>
#include "base/err.h"

#define HTTP_DEFAULT_BIND           "127.0.0.1"
#define HTTP_DEFAULT_BODY_LIMIT     ((size_t)1024 * 1024) /* bytes */
#define HTTP_DEFAULT_CONN_LIMIT     1024u
#define HTTP_DEFAULT_CONN_TIMEOUT_S 60u  /* idle connections; suspended ones never time out */
#define HTTP_MAX_SEGMENTS           32u  /* '/'-separated segments in a path or pattern */
#define HTTP_MAX_PARAMS             8u   /* {name} segments in one pattern */
#define HTTP_PARAM_NAME_MAX         32u  /* bytes of a {name} */
#define HTTP_PARAM_MAX              256u /* bytes of one decoded path parameter */
#define HTTP_MAX_QUERY              32u  /* query parameters in one request */
#define HTTP_MAX_RESP_HEADERS       16u  /* extra headers on one response */
#define HTTP_TOKEN_MAX              512u /* bytes of a bearer token */
#define HTTP_MAX_TIMEOUT_MS         (24u * 3600u * 1000u)
#define HTTP_STOP_GRACE_MS          2000u /* stop waits this long for answers in flight */
#define HTTP_TLS_FILE_MAX           ((size_t)1024 * 1024)
#define HTTP_APP_DATA_SIZE          256u /* bytes of per-request room for the server */

/* Route flags. The bits from HTTP_ROUTE_USER_FLAG(0) up are the server's
 * own (an admin-only mark, say); this module only passes them to authorize. */
enum http_route_flag {
    HTTP_ROUTE_PUBLIC = 1u << 0,    /* authorize is not called (health, metrics) */
    HTTP_ROUTE_JSON_BODY = 1u << 1, /* a JSON object body is required */
    HTTP_ROUTE_RAW_BODY = 1u << 2,  /* a body of any bytes is accepted (may be empty) */
};
#define HTTP_ROUTE_USER_FLAG(n) (1u << (16u + (n)))

struct http_request;
struct http_server;

/*
 * A route's handler, on the polling thread. Before it returns it must either
 * answer (http_request_respond_*, http_request_error) or suspend. It returns
 * 0 or a negative code; whatever it returns, a request it left unanswered
 * and not suspended gets 500 internal (503 unavailable while stopping).
 */
typedef int (*http_handler_fn)(struct http_request *req, void *ctx);

/* Before dispatch of a route without HTTP_ROUTE_PUBLIC, on the polling thread,
 * after the path and query parsed and before the body is read: true lets the
 * request through; false means the hook answered (401, 403: it should; if it
 * did not, the library answers 403 forbidden). */
typedef bool (*http_authorize_fn)(struct http_request *req, unsigned route_flags, void *ctx);

/* Before routing (step 1a), on the polling thread, for every request whose
 * target parsed: true lets it through; false means the hook answered (if it
 * did not, the library answers 503 unavailable). http_request_route is NULL
 * here; the path, query and headers may be read. Must not block. */
typedef bool (*http_admit_fn)(struct http_request *req, void *ctx);

/* A suspended request's deadline passed; see http_request_suspend. */
typedef void (*http_timeout_fn)(struct http_request *req, void *ctx);

/* One finished request, for the access log. Strings are borrowed for the call. */
struct http_access {
    const char *method;
    const char *path;    /* as the client sent it, without the query */
    const char *client;  /* address literal, "127.0.0.1" or "::1" */
    unsigned status;     /* 0: we queued no answer (the connection ended first, or MHD
                          * answered a malformed request itself) */
    int64_t duration_us; /* from the request line to the end of the answer */
};

/* Called once per request when MHD is done with it, on the polling thread
 * (or the thread in http_server_stop), and for each request the accept gate
 * refused, on the gate's thread (method and path "" when its request line
 * did not parse). Must not block. */
typedef void (*http_access_log_fn)(const struct http_access *entry, void *ctx);

/* One row of a route table: the server's routes are a static const array.
 * `arg` says what the row means to its handler (which of several kinds a
 * shared handler serves, drain or resume): a handler reads it with
 * http_request_route_arg and never re-parses its path. */
struct http_route {
    const char *method;      /* "GET", "POST", "PUT", "DELETE", ... (case matters) */
    const char *pattern;     /* "/v1/nodes/{name}/assignments": literal or {name} segments */
    http_handler_fn handler; /* never NULL */
    unsigned flags;          /* enum http_route_flag | HTTP_ROUTE_USER_FLAG(n) */
    const void *arg;         /* the handler's, borrowed; may be NULL */
};

struct http_config {
    const char *bind_addr;   /* IPv4 or IPv6 literal ("::1", "[::1]"); NULL: HTTP_DEFAULT_BIND */
    uint16_t port;           /* 0: an ephemeral port, see http_server_port */
    size_t body_limit;       /* bytes; 0: HTTP_DEFAULT_BODY_LIMIT */
    unsigned conn_limit;     /* 0: HTTP_DEFAULT_CONN_LIMIT; suspended requests count */
    unsigned conn_timeout_s; /* 0: HTTP_DEFAULT_CONN_TIMEOUT_S */
    /* TLS: both PEM files or neither (plain HTTP). */
    const char *tls_cert_file;
    const char *tls_key_file;
    /* Borrowed: the table must outlive the server. Matched in order; the
     * first row whose pattern and method match wins. */
    const struct http_route *routes;
    size_t nroutes;
    http_admit_fn admit;           /* NULL: every request is routed */
    http_authorize_fn authorize;   /* NULL: every route is open */
    http_access_log_fn access_log; /* NULL: none */
    void *ctx;                     /* passed to handlers, authorize and access_log */
};

/*
 * Creates a server from *cfg (copied; the strings in it need only live for
 * the call, the route table as long as the server). Checks every route
 * pattern, parses the bind address and reads the TLS files; binds nothing.
 * Returns 0 and sets *ret_srv (caller frees with http_server_free); or
 * GPO_EINVAL (a bad config), GPO_EIO (a TLS file unreadable), GPO_ENOMEM,
 * with one line in `err` (errlen bytes, always terminated) naming the
 * culprit, e.g. "route 3 (GET /v1/x{id}): a brace outside a whole {name}
 * segment" or
 * "TLS key /etc/gpuorch/key.pem: No such file or directory".
 */
int http_server_new(const struct http_config *cfg, struct http_server **ret_srv, char *err,
                    size_t errlen);

/*
 * Binds, listens and starts the polling and timer threads. Returns 0; or
 * GPO_EIO (socket, bind, listen, thread), GPO_ETLS (MHD refused the
 * certificate or key), GPO_ESTATE (already started, or stopped: a server
 * starts once), with a message such as "bind 127.0.0.1:8080: Address already
 * in use" in `err`. On failure the server is as before (may be freed).
 */
int http_server_start(struct http_server *srv, char *err, size_t errlen);

/* The bound port (useful with port 0); 0 before start. */
uint16_t http_server_port(const struct http_server *srv);

/*
 * Stops accepting, answers every still-suspended request with 503
 * unavailable (as do handlers and requests arriving meanwhile), waits up to
 * HTTP_STOP_GRACE_MS for answers in flight to be sent, then closes every
 * connection and joins the threads. No handler, hook or timeout callback runs
 * after it returns. Idempotent; a server never started is left as is.
 * Suspended requests still need their http_request_complete (a no-op now).
 */
void http_server_stop(struct http_server *srv);

/* Stops the server if running and frees it; NULL is fine. Requests whose
 * completion is still owed keep the little they need alive until then. */
void http_server_free(struct http_server *srv);

/*
 * Request access: on the polling thread, in the handler or authorize hook.
 * Strings are borrowed from the request. method, path, param, query, client,
 * json and body stay valid until the request is completed (also in a timeout
 * callback); header and bearer read MHD's copy and only in handler or hook.
 */
const char *http_request_method(const struct http_request *req);
/* The path as sent (percent-encoded), without the query. */
const char *http_request_path(const struct http_request *req);
/* The query as sent (percent-encoded), without the '?'; "" when none. */
const char *http_request_raw_query(const struct http_request *req);
/* The matched route (the caller's table row). */
const struct http_route *http_request_route(const struct http_request *req);
/* The matched route's arg. */
const void *http_request_route_arg(const struct http_request *req);
/* A path parameter by its {name}, percent-decoded, UTF-8, at most
 * HTTP_PARAM_MAX bytes; NULL when name is NULL or the pattern has no such
 * name. */
const char *http_request_param(const struct http_request *req, const char *name);
/* The first query parameter called `name`, decoded ('+' is a space); NULL when
 * absent. A parameter without '=' has the value "". */
const char *http_request_query(const struct http_request *req, const char *name);
/* Query parameters in request order, so that handlers can reject unknown
 * ones: count, then 0 and *ret_name, *ret_value for i < count (GPO_EINVAL
 * otherwise). */
size_t http_request_query_count(const struct http_request *req);
int http_request_query_at(const struct http_request *req, size_t i, const char **ret_name,
                          const char **ret_value);
/* A request header (name case-insensitive); NULL when absent. */
const char *http_request_header(struct http_request *req, const char *name);
/* The token of "Authorization: Bearer <token>" (scheme case-insensitive,
 * token of RFC 6750 characters, at most HTTP_TOKEN_MAX bytes); NULL when the
 * header is absent or anything else ("Basic x", "Bearer", "Bearer a b"). */
const char *http_request_bearer(struct http_request *req);
/* The client's address literal. */
const char *http_request_client(const struct http_request *req);
/* HTTP_APP_DATA_SIZE bytes, suitably aligned and zeroed when the request
 * began, for the server's own per-request data (the user authorize found,
 * say); valid as long as the request. */
void *http_request_app_data(struct http_request *req);
/* The parsed body of a HTTP_ROUTE_JSON_BODY route (borrowed: json_incref to
 * keep it); NULL on other routes. */
json_t *http_request_json(const struct http_request *req);
/* The raw body (HTTP_ROUTE_RAW_BODY and JSON routes; not NUL-terminated; NULL
 * and 0 when empty). */
const void *http_request_body(const struct http_request *req, size_t *ret_len);

/*
 * Adds a header to the answer still to come (Location, Retry-After, ...):
 * in the handler, or by the one thread about to complete a suspended
 * request. Both strings copied. 0; GPO_EINVAL (a CR or LF in the value, an
 * empty or non-token name, a name the library sets itself: Content-Type,
 * Content-Length, Transfer-Encoding, Connection; more than
 * HTTP_MAX_RESP_HEADERS), GPO_ESTATE (already answered), GPO_ENOMEM.
 */
int http_request_add_header(struct http_request *req, const char *name, const char *value);

/*
 * Answers, in the handler (or authorize hook). status is 100..599. Every
 * answer gets Content-Type; JSON ones "application/json". Returns 0;
 * GPO_EINVAL (bad status or type), GPO_ESTATE (already answered or
 * suspended), GPO_ENOMEM: the request is then still unanswered.
 */
/* body is taken (even on failure); NULL: an empty body (204, say). */
int http_request_respond_json(struct http_request *req, unsigned status, json_t *body);
/* data copied; content_type such as "text/plain; version=0.0.4". */
int http_request_respond_bytes(struct http_request *req, unsigned status, const char *content_type,
                               const void *data, size_t len);
/* data borrowed and must outlive the server (a static asset, say). */
int http_request_respond_static(struct http_request *req, unsigned status, const char *content_type,
                                const void *data, size_t len);
/* The standard error: `code` a short machine-readable word ("invalid_field"),
 * the message one line from fmt (invalid UTF-8 replaced by '?', cut at 512
 * bytes). */
int http_request_error(struct http_request *req, unsigned status, const char *code, const char *fmt,
                       ...) __attribute__((format(printf, 4, 5)));

/*
 * Suspends the request, in its handler: the handler then returns and the
 * polling thread serves others. timeout_ms > 0 (at most HTTP_MAX_TIMEOUT_MS)
 * with on_timeout: once the request has been suspended that long, the timer
 * thread calls on_timeout(req, ctx), which should complete it (a long-poll's
 * "nothing new", say); it must not block. 0 means no deadline.
 *
 * Every successful suspend must be balanced by exactly one
 * http_request_complete[_error], from any thread and whatever happened
 * meanwhile (the client left, the server stopped or was freed: the
 * completion is then a no-op that frees what it was given). That call is what
 * releases the request: after it returns, req must not be used. A server that
 * hands req to another thread AND sets a timeout must make sure only one of
 * the two completes (its own lock around a waiter list, say); inside
 * on_timeout a completion that lost that race returns GPO_ESTATE harmlessly.
 *
 * Returns 0; GPO_EINVAL (timeout without callback or over the cap),
 * GPO_ESTATE (not in the handler, already answered or suspended),
 * GPO_ESHUTDOWN (the server is stopping: answer now instead). It allocates
 * nothing: the timer list is threaded through the requests.
 */
int http_request_suspend(struct http_request *req, unsigned timeout_ms, http_timeout_fn on_timeout,
                         void *ctx);

/*
 * Completes a suspended request from any thread: answers `status` with the
 * JSON body (taken, even on failure; NULL: empty) and resumes the connection.
 * Returns 0 (also when the answer could no longer be delivered);
 * GPO_ESTATE (not suspended by the caller, or completed already within a
 * timeout callback), GPO_EINVAL (bad status: the request is answered 500
 * instead and released all the same), GPO_ENOMEM (likewise answered 500 and
 * released).
 */
int http_request_complete(struct http_request *req, unsigned status, json_t *body);
/* The same with the standard error body. */
int http_request_complete_error(struct http_request *req, unsigned status, const char *code,
                                const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/*
 * Streamed answers (chunked transfer encoding; an HTTP/1.0 client gets a body
 * ended by the connection's close). The body comes from a read callback that
 * runs on the polling thread and must not block: a log being followed, a
 * proxied answer fed by a worker thread. A read with nothing to give returns
 * 0; the request then sleeps (MHD-suspended, holding no thread) until some
 * thread calls http_stream_wake, and the read runs again. A wake that comes
 * while a read runs is not lost: the read is retried.
 *
 * While a stream sleeps MHD does not watch its socket, so a client that left
 * is noticed at the next read that finds nothing (the library then checks the
 * socket and cuts the stream): a producer that may stay silent for long
 * should wake its streams now and then (once a second, say).
 *
 * Lifetime. free_ctx(ctx) runs exactly once, when MHD is done with the
 * answer (the end was sent, the client left, the stream was cut or the server
 * stopped), on the polling thread or the thread in http_server_stop; or, for
 * an answer that never went out, on the thread of the call that made it. No
 * read runs after it. The handle a producer gets (ret_stream) is reference
 * counted apart from that: it stays valid until the producer's
 * http_stream_release, also after free_ctx ran, also after the server was
 * freed (the server's memory lives on until the last handle is released).
 * Waking a closed stream does nothing; http_stream_closed tells the producer
 * to stop.
 */
#define HTTP_STREAM_END   (-1)   /* read: the body is complete (the answer ends cleanly) */
#define HTTP_STREAM_ERROR (-2)   /* read: cut the connection (the client sees a broken body) */
#define HTTP_STREAM_BLOCK 16384u /* the most bytes one read is asked for */

struct http_stream;

/* Copies at most max bytes of the body into buf and returns how many (> 0);
 * 0 when there are none now; HTTP_STREAM_END; HTTP_STREAM_ERROR. On the
 * polling thread; must not block. */
typedef ssize_t (*http_stream_read_fn)(void *ctx, char *buf, size_t max);

/*
 * Answers with a stream, in the handler (or authorize hook). Headers added
 * with http_request_add_header go with it; content_type as for
 * http_request_respond_bytes. ctx is taken even on failure: free_ctx (NULL:
 * none) has then run before the call returns. ret_stream NULL: no handle (a
 * read that never returns 0 needs no wake); else *ret_stream is the caller's
 * reference (http_stream_release). Returns 0; GPO_EINVAL (bad status, type
 * or no read), GPO_ESTATE (already answered or suspended), GPO_ENOMEM: the
 * request is then still unanswered.
 */
int http_request_respond_stream(struct http_request *req, unsigned status, const char *content_type,
                                http_stream_read_fn read, void (*free_ctx)(void *ctx), void *ctx,
                                struct http_stream **ret_stream);

/*
 * Completes a suspended request with a stream, from any thread (in place of
 * http_request_complete, and releasing the suspension the same way). ctx as
 * above. Returns 0 and *ret_stream when ret_stream is not NULL, also when the
 * answer can no longer be delivered (the server stopped first: the stream is
 * then closed and free_ctx has run); GPO_ESTATE (a request whose suspension
 * is not held: nothing released); GPO_EINVAL, GPO_ENOMEM (the request is
 * completed 500 instead and released all the same).
 */
int http_request_complete_stream(struct http_request *req, unsigned status,
                                 const char *content_type, http_stream_read_fn read,
                                 void (*free_ctx)(void *ctx), void *ctx,
                                 struct http_stream **ret_stream);

/* Runs the stream's read again soon (any thread; NULL or closed: nothing). */
void http_stream_wake(struct http_stream *st);
/* Whether MHD is done with the stream (free_ctx ran or is about to). */
bool http_stream_closed(struct http_stream *st);
/* Another reference to a handle, for a thread that found it under its own
 * lock and wakes it after letting go of that lock. */
void http_stream_ref(struct http_stream *st);
/* Drops a reference; the handle is gone after the last one. NULL is fine. */
void http_stream_release(struct http_stream *st);

#endif

/*
 * httpc.h - a small HTTP client over libcurl: the agent's calls to the
 * controller, and the controller's calls to agents (log proxy).
 *
 * A client is bound to one base URL ("http://127.0.0.1:8080") and one bearer
 * token, and keeps its connection alive between requests. A client is used by
 * one thread at a time (libcurl's easy handles are not shared); a program with
 * several threads that talk to the same server makes one client per thread.
 *
 * Several controllers: the base URL may be a list, "http://a:8080,http://b:8080"
 * (commas, blanks around them allowed; each entry as a single URL is; at most
 * HTTPC_ADDRS_MAX). The client keeps a current address, where every request
 * goes first: the list's first at the start, then the one that last answered.
 * A request moves on within itself:
 *   - a connection that could not be made (refused, unreachable, connect
 *     timeout, a TLS handshake; nothing of the request was sent, so any
 *     method is safe): the next address, at most one round over the list;
 *   - 307 or 308 with a Location on another origin (a follower naming the
 *     leader): that origin (the Location less the request's path, where it
 *     ends with it) is learned, becomes current and gets the same request,
 *     method and body (at most 4 hops, HTTPC_HOPS_MAX; never https to http);
 *   - 503 with "X-Gpuorch-Role: follower" (a controller that leads nothing):
 *     the next address. When every address is a follower or down, the last
 *     answer comes back (the caller retries as it does for any 503).
 * A request that fails once sent (a timeout in the middle of the answer, a
 * reset) is not sent again, since a POST may have been applied: its error
 * comes back, and the next request begins at the next address. The tries
 * share timeout_ms. Streams follow the same way before the first byte of the
 * body reaches the callback (the bodies of answers passed over never do). A
 * single URL costs nothing more than before: one connection, kept alive, and
 * a redirect to another origin is followed there too. httpc_url names the
 * address in use, for messages.
 *
 * Errors: functions return 0 or one of the negative HTTPC_* codes, and write
 * one line into the caller's `err` buffer (errlen bytes; may be NULL/0) that
 * names the method, the URL and libcurl's reason ("GET
 * http://127.0.0.1:8080/v1/health: Couldn't connect to server"). A request
 * that got an answer returns 0 whatever its status: 4xx and 5xx are the
 * caller's to read. Nothing here logs or exits.
 */
#ifndef GPUORCH_UTIL_HTTPC_H
#define GPUORCH_UTIL_HTTPC_H

#include <stdbool.h>
#include <stddef.h>
#include "base/err.h"

/* Largest answer body httpc_request keeps (httpc_stream has no limit). */
#define HTTPC_BODY_MAX ((size_t)64 * 1024 * 1024)
/* Longest base URL (or list of them) and token, NUL included. */
#define HTTPC_URL_MAX   1024u
#define HTTPC_TOKEN_MAX 512u
/* Most addresses in one list. */
#define HTTPC_ADDRS_MAX 16u

struct httpc;

/* What is wrong with a list of base URLs. */
struct httpc_urls_fault {
    const char *entry; /* the bad entry, inside the list (borrowed) */
    size_t len;        /* its length (0: an empty entry) */
    size_t index;      /* which one, from 1 */
    size_t count;      /* of how many */
    const char *why;   /* "expected http://HOST:PORT or https://HOST:PORT", ... */
};

/*
 * Checks `list` (one base URL, or several with commas): each entry
 * http://HOST[:PORT][/PATH] or https://..., blanks around commas allowed, no
 * other space; no empty entry; at most HTTPC_ADDRS_MAX; the whole under
 * HTTPC_URL_MAX bytes. 0; GPO_EINVAL with *ret (may be NULL) saying which
 * entry and why, for callers' messages ("--server: ... 'ftp://x' (entry 2
 * of 3)").
 */
int httpc_urls_check(const char *list, struct httpc_urls_fault *ret);
/* A fault as "'ftp://x' (entry 2 of 3): WHY" ("'ENTRY': WHY" in a list of
 * one) into buf (len bytes; HTTPC_URL_FAULT_MAX holds any); returns buf. */
#define HTTPC_URL_FAULT_MAX 320u
const char *httpc_urls_describe(const struct httpc_urls_fault *f, char *buf, size_t len);

/*
 * A client for base_url ("http://host:port", no trailing path, or a list of
 * them) sending "Authorization: Bearer token" (NULL: no header). Both
 * copied. Returns 0 and *ret (caller frees with httpc_free); GPO_EINVAL
 * (httpc_urls_check's faults, "URL 'ftp://x' (entry 2 of 3): expected ...";
 * a token with a CR or LF); GPO_ENOMEM.
 */
int httpc_new(const char *base_url, const char *token, struct httpc **ret, char *err,
              size_t errlen);
void httpc_free(struct httpc *c);

/* The base URL in use: the one of the last answer (or error), where the next
 * request goes first. Borrowed until the next call on c. */
const char *httpc_url(const struct httpc *c);

/* Replaces the token (copied; NULL: none). 0, GPO_EINVAL or GPO_ENOMEM. */
int httpc_set_token(struct httpc *c, const char *token);

/* One more header on every request from now on ("Idempotency-Key", say), or
 * none when name is NULL. Both copied. 0; GPO_EINVAL for a name that is
 * not a token, a value with a CR or LF, or over HTTPC_HEADER_MAX bytes. */
#define HTTPC_HEADER_MAX 1024u
int httpc_set_header(struct httpc *c, const char *name, const char *value);

/* An answer: status and body (NUL-terminated, owned: httpc_response_release);
 * follower: it said "X-Gpuorch-Role: follower" (every address was a
 * follower or down, see above). */
struct httpc_response {
    long status;
    char *body;
    size_t len;
    bool follower;
};
void httpc_response_release(struct httpc_response *r);

/*
 * Sends METHOD base_url+path (path starts with '/', query included) with
 * `body` (len bytes, sent as application/json; NULL: no body) and waits up to
 * timeout_ms for the whole answer (connecting included; at most 5 s of it to
 * connect). Returns 0 and *ret; GPO_ECONNREFUSED, GPO_ETIMEDOUT, GPO_EIO,
 * GPO_E2BIG (body over HTTPC_BODY_MAX), GPO_ENOMEM, GPO_EINVAL.
 */
int httpc_request(struct httpc *c, const char *method, const char *path, const char *body,
                  size_t len, long timeout_ms, struct httpc_response *ret, char *err,
                  size_t errlen);

/*
 * A streamed GET: calls on_data(data, len, ctx) for each piece of the body as
 * it arrives, and also with len 0 about once a second while nothing arrives
 * (so that a caller can stop a long stream). on_data returns 0 to go on,
 * non-zero to stop (the call then returns GPO_ECANCELED). *ret_status is the
 * answer's status, set before the first on_data call with data (bodies of
 * every status are passed to on_data, so a caller can tell an error's body
 * from the stream it asked for). timeout_ms 0: no overall limit (a follow stream); connecting is
 * still limited to 5 s. Returns 0 when the body ended; else as
 * httpc_request, or GPO_ECANCELED.
 */
typedef int (*httpc_data_fn)(const void *data, size_t len, void *ctx);
int httpc_stream(struct httpc *c, const char *path, long timeout_ms, httpc_data_fn on_data,
                 void *ctx, long *ret_status, char *err, size_t errlen);
/* The same with a method and a JSON body (len bytes, borrowed; NULL: a GET
 * without one), whose answer is streamed: a job step's output (steps.h). */
int httpc_stream_body(struct httpc *c, const char *method, const char *path, const char *body,
                      size_t len, long timeout_ms, httpc_data_fn on_data, void *ctx,
                      long *ret_status, char *err, size_t errlen);

/*
 * Percent-encodes s (borrowed) for a path segment or query value into buf
 * (len bytes): letters, digits and "-._~" stay. 0; GPO_E2BIG when it does
 * not fit (buf then holds ""); GPO_EINVAL for NULL.
 */
int httpc_escape(const char *s, char *buf, size_t len);

#endif

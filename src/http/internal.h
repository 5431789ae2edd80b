/*
 * internal.h - private to src/http: the request and server objects and the
 * functions that http.c (requests, dispatch, MHD callbacks, suspension),
 * server.c (the server's life) and respond.c (answers) share. The public API
 * is http.h; the pure half of dispatch is route.h.
 *
 * How it fits MHD:
 *  - We bind the listen socket ourselves, so that a failure can be named
 *    ("bind 127.0.0.1:80: Permission denied") and IPv6 needs nothing
 *    special. Plain HTTP: the accept gate (gate.c) accepts on it and hands
 *    connections to MHD (MHD_USE_NO_LISTEN_SOCKET, MHD_add_connection); with
 *    TLS, MHD accepts on it itself.
 *  - The request object is made in the URI-log callback from the raw
 *    request target, so that we split the path before any decoding (a %2F
 *    stays inside its segment) and parse the query ourselves. It is freed by
 *    reference count: MHD holds one until NOTIFY_COMPLETED, a suspension one
 *    until its completion, a running timeout callback one. That is why a
 *    completion is always safe to make, even after the client left or the
 *    server stopped: the request it names is still there.
 *  - An answer is stored on the request and queued by the access handler
 *    on the polling thread: right after the handler, or, for a suspended
 *    request, when MHD calls the handler again after MHD_resume_connection.
 *    So MHD_queue_response only ever runs on MHD's own thread.
 *  - srv->mu guards every field another thread may touch (state, resp,
 *    refs, lists). No MHD call and no callback runs under it, since MHD
 *    may hold its own locks while it calls us.
 *  - The server object itself lives until the last request is released,
 *    for completions owed after http_server_free.
 */
#ifndef GPUORCH_HTTP_INTERNAL_H
#define GPUORCH_HTTP_INTERNAL_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <jansson.h>
#include <microhttpd.h>

#include "http/http.h"
#include "http/route.h"

enum req_state {
    REQ_RECEIVING,  /* headers and body arriving, then the handler */
    REQ_SUSPENDING, /* the handler called http_request_suspend; MHD not told yet */
    REQ_SUSPENDED,  /* MHD-suspended, waiting for its completion */
    REQ_RESUMING,   /* answered while suspended; MHD will call us to queue it */
    REQ_ANSWERED,   /* the answer is queued */
    REQ_DONE,       /* MHD is done with it */
};

struct hdr {
    char *name, *value;
};

struct http_request {
    struct http_server *srv;
    struct MHD_Connection *conn;    /* NULL once REQ_DONE */
    const struct http_route *route; /* the matched row of cfg.routes */
    char method[32];
    struct route_target target; /* path, query and parameters */
    char client[INET6_ADDRSTRLEN];
    int64_t start_us;
    bool headers_seen, in_handler, body_unexpected, body_too_big, body_oom;
    char *body;
    size_t body_len, body_cap;
    json_t *json;
    struct hdr hdrs[HTTP_MAX_RESP_HEADERS];
    size_t nhdrs;
    unsigned status; /* of the stored or queued answer */
    /* under srv->mu from the handler on */
    struct MHD_Response *resp; /* the stored answer, not yet queued */
    bool resp_shared;          /* one of srv's prebuilt answers: not ours to destroy */
    enum req_state state;
    unsigned refs;
    bool suspend_held; /* a completion is owed */
    http_timeout_fn on_timeout;
    void *timeout_ctx;
    unsigned timeout_ms;
    int64_t deadline_us;
    bool armed;                         /* in the timer list */
    struct http_request *tprev, *tnext; /* timer list, by deadline */
    struct http_request *prev, *next;   /* srv->suspended */
    union {
        max_align_t align;
        unsigned char bytes[HTTP_APP_DATA_SIZE];
    } app; /* the server's own, zeroed at the start */
};

struct http_server {
    struct http_config cfg; /* strings cleared: only routes and callbacks kept */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char addr_text[64];
    char *tls_cert, *tls_key;
    struct route_table *table;
    struct MHD_Response *resp_oom, *resp_stop;
    struct MHD_Daemon *daemon;
    struct http_gate *gate; /* plain HTTP: accepts and judges new connections */
    uint16_t port;
    pthread_t timer;
    bool sync_init, started, timer_quit;
    pthread_mutex_t mu;
    pthread_cond_t timer_cond; /* the timer list's head changed, or quit */
    pthread_cond_t idle_cond;  /* resuming or nlive went down */
    bool stopping, freed;
    size_t resuming; /* MHD_resume_connection calls in flight off the polling thread */
    size_t nlive;    /* requests MHD holds */
    size_t nreqs;    /* request and stream objects not freed (stream.c) */
    struct http_request *suspended;
    struct http_request *thead, *ttail;
};

/* ---- http.c: time, the timer thread and MHD's callbacks ---- */

/* CLOCK_MONOTONIC in microseconds (the clock of srv's condition variables). */
int64_t http_mono_us(void);

/* The address literal of an IPv4 or IPv6 sa into buf (len bytes); buf is
 * left as is for another family or NULL. */
void http_addr_text(const struct sockaddr *sa, char *buf, size_t len);

/* Waits on c (m held) until signalled or the monotonic deadline_us passes. */
void http_wait_until(pthread_cond_t *c, pthread_mutex_t *m, int64_t deadline_us);

/* Takes req out of srv's timer list, if it is there. Under srv->mu. */
void http_timer_disarm(struct http_server *srv, struct http_request *req);

/* The timer thread (arg: the server): fires suspended requests' deadlines
 * until srv->timer_quit is set under srv->mu and timer_cond signalled. */
void *http_timer_main(void *arg);

/* MHD's callbacks, cls being the server: the access handler, the URI-log
 * callback (which makes the request object, NULL when out of memory) and
 * NOTIFY_COMPLETED (which logs the access and drops MHD's reference). */
enum MHD_Result http_on_access(void *cls, struct MHD_Connection *conn, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls);
void *http_on_uri(void *cls, const char *uri, struct MHD_Connection *conn);
void http_on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                       enum MHD_RequestTerminationCode toe);

/* ---- server.c ---- */

/* Frees srv and everything it owns, a half-built one too: on a failed
 * http_server_new, or once http_server_free was called (the server is
 * stopped) and no request object is left (srv->nreqs == 0). */
void http_server_destroy(struct http_server *srv);

/* ---- gate.c: the accept gate (plain HTTP only) ---- */

struct http_gate;

/* Starts the gate's thread on listen_fd (taken: closed on failure too),
 * handing what it passes to srv->daemon, which must be running and made with
 * MHD_USE_NO_LISTEN_SOCKET. 0 and *ret; GPO_ENOMEM, or -errno. */
int http_gate_start(struct http_server *srv, int listen_fd, struct http_gate **ret);

/* Stops accepting, closes the listen socket and the connections not yet
 * handed over, joins the thread and frees the gate. NULL is fine. */
void http_gate_stop(struct http_gate *g);

/* ---- respond.c: building and storing answers (any thread: building touches
 * only the request's headers) ---- */

/* Whether status is 100..599. */
bool http_status_ok(unsigned status);

/* A JSON answer with req's extra headers: body taken (even on failure; NULL:
 * an empty body). 0 and *ret (caller destroys or stores it); GPO_ENOMEM. */
int http_build_json(struct http_request *req, json_t *body, struct MHD_Response **ret);

/* The standard error answer ({"error": {status, code, message}}), the message
 * from fmt cut at 512 bytes and made UTF-8. 0 and *ret; GPO_ENOMEM. */
__attribute__((format(printf, 4, 0))) int http_build_error(struct http_request *req,
                                                           unsigned status, const char *code,
                                                           const char *fmt, va_list ap,
                                                           struct MHD_Response **ret);

/* Store req's answer and its status, under srv->mu once other threads may
 * see the request. set_shared stores r, one of srv's prebuilt answers
 * (borrowed: never destroyed with the request); set_resp stores r (taken),
 * or for NULL the prebuilt out-of-memory 500. */
void http_set_shared(struct http_request *req, struct MHD_Response *r, unsigned status);
void http_set_resp(struct http_request *req, struct MHD_Response *r, unsigned status);

/* Destroys the stored answer unless it is a shared one; leaves none. */
void http_drop_resp(struct http_request *req);

/* In the handler or hook: may the request be answered now? */
bool http_can_answer(const struct http_request *req);

/* Adds Content-Type ctype and req's extra headers to r: 0 or GPO_ENOMEM. */
int http_response_headers(struct http_request *req, struct MHD_Response *r, const char *ctype);

/* ---- stream.c: streamed answers ----
 *
 * A stream's answer is an MHD callback response. When its read has nothing,
 * the reader MHD-suspends the connection and, unless a wake came meanwhile,
 * puts the request on srv->suspended (state left REQ_ANSWERED) so that
 * http_server_stop resumes it like any suspended request; http_stream_wake
 * takes it off again and resumes it, counted in srv->resuming. The stream
 * object counts in srv->nreqs so that srv->mu, which guards its flags, lives
 * as long as any handle does; it never touches the request once MHD is done
 * with the answer. */

#endif

/*
 * stream.c - streamed answers (http.h): an MHD callback response whose read
 * may have nothing yet, the suspension of its connection until a wake, and
 * the handle a producer thread keeps. How it fits the rest: internal.h.
 *
 * The races, and who wins them (every flag below is under srv->mu, and no MHD
 * call runs under it):
 *  - a wake during a read: the read clears `woken` before it calls the
 *    producer; a wake sets it; the reader checks it once more after
 *    MHD_suspend_connection and resumes at once when it is set. So a wake is
 *    never lost, and MHD_resume_connection always follows the suspension it
 *    ends, as MHD wants.
 *  - a wake of a sleeping stream: `suspended` says the reader put the request
 *    on srv->suspended; whoever takes it off (a wake, or http_server_stop,
 *    which sets srv->stopping first) resumes it, exactly once.
 *  - the end: MHD's free callback sets `closed`; a wake then does nothing.
 *    The request may be gone before that (MHD's completion can come first),
 *    but `suspended` is only set while the connection is MHD-suspended, when
 *    nothing but http_server_stop can end it: so a wake that finds it set,
 *    with the server not stopping, may use the request.
 */
#define _GNU_SOURCE /* POLLRDHUP */
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "http/http.h"
#include "http/internal.h"
#include "base/banned.h"

/* Reads retried without sleeping when wakes keep coming during them. */
#define REREADS 4

struct http_stream {
    struct http_server *srv;
    struct http_request *req; /* only while MHD holds the answer */
    http_stream_read_fn read;
    void (*free_ctx)(void *ctx);
    void *ctx;
    /* under srv->mu: */
    unsigned refs;  /* the MHD answer's, until its free callback; each producer's */
    bool woken;     /* a wake since the last read began */
    bool suspended; /* the reader put req on srv->suspended; a resume is owed */
    bool closed;    /* MHD is done with the answer */
};

static void stream_unref(struct http_stream *st)
{
    struct http_server *srv = st->srv;
    pthread_mutex_lock(&srv->mu);
    bool last = --st->refs == 0, srv_last = false;
    if (last) {
        srv->nreqs--;
        srv_last = srv->freed && srv->nreqs == 0;
    }
    pthread_mutex_unlock(&srv->mu);
    if (!last)
        return;
    free(st);
    if (srv_last)
        http_server_destroy(srv);
}

static void list_insert(struct http_server *srv, struct http_request *req)
{
    req->prev = NULL;
    req->next = srv->suspended;
    if (req->next)
        req->next->prev = req;
    srv->suspended = req;
}

static void list_remove(struct http_server *srv, struct http_request *req)
{
    *(req->prev ? &req->prev->next : &srv->suspended) = req->next;
    if (req->next)
        req->next->prev = req->prev;
    req->prev = req->next = NULL;
}

/* Whether the client closed or broke the connection. MHD reads nothing while
 * it sends an answer, so without this look a client that left while the
 * stream slept could go unnoticed until a write failed. */
static bool peer_gone(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return false;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* After a read that found nothing: sleep until a wake, unless one came. */
static void sleep_until_wake(struct http_stream *st)
{
    struct http_server *srv = st->srv;
    struct http_request *req = st->req;
    MHD_suspend_connection(req->conn);
    pthread_mutex_lock(&srv->mu);
    bool resume = st->woken || srv->stopping;
    if (!resume) {
        st->suspended = true;
        list_insert(srv, req);
    }
    pthread_mutex_unlock(&srv->mu);
    if (resume) /* as after_handler does: the read runs again at once */
        MHD_resume_connection(req->conn);
}

/* MHD's content reader, on the polling thread. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct http_stream *st = cls;
    struct http_server *srv = st->srv;
    (void)pos;
    max = max < HTTP_STREAM_BLOCK ? max : HTTP_STREAM_BLOCK; /* MHD offers its whole buffer */
    for (int k = 0; k < REREADS; k++) {
        pthread_mutex_lock(&srv->mu);
        bool stopping = srv->stopping;
        st->woken = false;
        st->suspended = false; /* http_server_stop may have resumed us */
        if (stopping && st->req->state == REQ_RESUMING)
            st->req->state = REQ_ANSWERED; /* so the access log shows our status */
        pthread_mutex_unlock(&srv->mu);
        if (stopping)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        ssize_t n = st->read(st->ctx, buf, max);
        if (n > 0)
            return (size_t)n <= max ? n : MHD_CONTENT_READER_END_WITH_ERROR;
        if (n == HTTP_STREAM_END)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (n != 0 || peer_gone(st->req->conn))
            return MHD_CONTENT_READER_END_WITH_ERROR;
        pthread_mutex_lock(&srv->mu);
        bool again = st->woken;
        pthread_mutex_unlock(&srv->mu);
        if (!again)
            break;
    }
    sleep_until_wake(st);
    return 0;
}

/* MHD is done with the answer (sent, cut, client gone, daemon stopped). */
static void stream_done(void *cls)
{
    struct http_stream *st = cls;
    pthread_mutex_lock(&st->srv->mu);
    st->closed = true;
    st->suspended = false;
    st->req = NULL;
    pthread_mutex_unlock(&st->srv->mu);
    if (st->free_ctx)
        st->free_ctx(st->ctx);
    stream_unref(st);
}

static bool stream_args_ok(unsigned status, const char *ctype, http_stream_read_fn read)
{
    return http_status_ok(status) && ctype && ctype[0] && !strpbrk(ctype, "\r\n") && read;
}

/* The answer and its stream. On failure ctx has been freed. 0, GPO_ENOMEM. */
static int stream_build(struct http_request *req, const char *ctype, http_stream_read_fn read,
                        void (*free_ctx)(void *ctx), void *ctx, struct http_stream **ret_stream,
                        struct MHD_Response **ret_resp)
{
    struct http_server *srv = req->srv;
    struct http_stream *st = calloc(1, sizeof(*st));
    if (!st) {
        if (free_ctx)
            free_ctx(ctx);
        return GPO_ENOMEM;
    }
    *st = (struct http_stream){.srv = srv,
                               .req = req,
                               .read = read,
                               .free_ctx = free_ctx,
                               .ctx = ctx,
                               .refs = ret_stream ? 2 : 1};
    pthread_mutex_lock(&srv->mu);
    srv->nreqs++;
    pthread_mutex_unlock(&srv->mu);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, HTTP_STREAM_BLOCK,
                                                               stream_read, st, stream_done);
    if (!r) {
        st->refs = 1;
        stream_done(st);
        return GPO_ENOMEM;
    }
    if (http_response_headers(req, r, ctype) != 0) {
        if (ret_stream)
            stream_unref(st);
        MHD_destroy_response(r); /* runs stream_done */
        return GPO_ENOMEM;
    }
    if (ret_stream)
        *ret_stream = st;
    *ret_resp = r;
    return 0;
}

int http_request_respond_stream(struct http_request *req, unsigned status, const char *content_type,
                                http_stream_read_fn read, void (*free_ctx)(void *ctx), void *ctx,
                                struct http_stream **ret_stream)
{
    struct MHD_Response *r = NULL;
    int rc = !stream_args_ok(status, content_type, read) ? GPO_EINVAL
             : !http_can_answer(req)                     ? GPO_ESTATE
                                                         : 0;
    if (rc) {
        if (free_ctx)
            free_ctx(ctx);
        return rc;
    }
    if ((rc = stream_build(req, content_type, read, free_ctx, ctx, ret_stream, &r)) != 0)
        return rc;
    http_set_resp(req, r, status); /* in the handler: no other thread knows of req yet */
    return 0;
}

int http_request_complete_stream(struct http_request *req, unsigned status,
                                 const char *content_type, http_stream_read_fn read,
                                 void (*free_ctx)(void *ctx), void *ctx,
                                 struct http_stream **ret_stream)
{
    struct http_server *srv = req->srv;
    struct MHD_Response *r = NULL;
    pthread_mutex_lock(&srv->mu);
    bool held = req->suspend_held;
    pthread_mutex_unlock(&srv->mu);
    if (!held || !stream_args_ok(status, content_type, read)) {
        if (free_ctx)
            free_ctx(ctx);
        if (!held)
            return GPO_ESTATE;
        http_request_complete_error(req, 500, "internal", "a streamed answer with bad arguments");
        return GPO_EINVAL;
    }
    struct http_stream *st = NULL;
    int rc = stream_build(req, content_type, read, free_ctx, ctx, &st, &r);
    if (rc) {
        http_request_complete_error(req, 500, "internal", "out of memory");
        return rc;
    }
    struct MHD_Connection *resume = NULL;
    pthread_mutex_lock(&srv->mu);
    if (req->state == REQ_SUSPENDING || req->state == REQ_SUSPENDED) {
        /* REQ_RESUMING either way: after_handler queues what it finds then
         * (and resumes what it suspended), and the completion below sees an
         * answered request whose suspension it only releases. */
        if (req->state == REQ_SUSPENDED) {
            http_timer_disarm(srv, req);
            list_remove(srv, req);
            resume = req->conn;
            srv->resuming++;
        }
        http_set_resp(req, r, status);
        req->state = REQ_RESUMING;
        r = NULL;
    }
    pthread_mutex_unlock(&srv->mu);
    if (r) /* http_server_stop answered it first: the stream closes unsent */
        MHD_destroy_response(r);
    if (resume) {
        MHD_resume_connection(resume);
        pthread_mutex_lock(&srv->mu);
        if (--srv->resuming == 0)
            pthread_cond_broadcast(&srv->idle_cond);
        pthread_mutex_unlock(&srv->mu);
    }
    http_request_complete(req, 500, NULL); /* releases the suspension, answers nothing */
    if (ret_stream)
        *ret_stream = st;
    else
        stream_unref(st);
    return 0;
}

void http_stream_wake(struct http_stream *st)
{
    if (!st)
        return;
    struct http_server *srv = st->srv;
    struct MHD_Connection *resume = NULL;
    pthread_mutex_lock(&srv->mu);
    if (st->closed || srv->stopping) {
        /* nothing: http_server_stop resumes a sleeping stream itself */
    } else if (st->suspended) {
        st->suspended = false;
        list_remove(srv, st->req);
        resume = st->req->conn;
        srv->resuming++;
    } else {
        st->woken = true;
    }
    pthread_mutex_unlock(&srv->mu);
    if (resume) {
        MHD_resume_connection(resume);
        pthread_mutex_lock(&srv->mu);
        if (--srv->resuming == 0)
            pthread_cond_broadcast(&srv->idle_cond);
        pthread_mutex_unlock(&srv->mu);
    }
}

bool http_stream_closed(struct http_stream *st)
{
    if (!st)
        return true;
    pthread_mutex_lock(&st->srv->mu);
    bool closed = st->closed;
    pthread_mutex_unlock(&st->srv->mu);
    return closed;
}

void http_stream_ref(struct http_stream *st)
{
    pthread_mutex_lock(&st->srv->mu);
    st->refs++;
    pthread_mutex_unlock(&st->srv->mu);
}

void http_stream_release(struct http_stream *st)
{
    if (st)
        stream_unref(st);
}

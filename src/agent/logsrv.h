/*
 * logsrv.h - the node agent's log server: the controller reads attempts'
 * stdout and stderr through it (and proxies them to users).
 *
 *   GET /v1/attempts/{job}/{attempt}/logs?stream=stdout|stderr&offset=N&follow=1
 *   HEAD likewise (the headers only, never streamed)
 *
 * Authentication: "Authorization: Bearer TOKEN", the token the controller
 * issued this node, compared in constant time; anything else is 401.
 *
 * The attempt: STATE_DIR/attempts/JOB.ATTEMPT, whose attempt.json (written by
 * the launcher) gives the attempt's uid and the paths of its log files:
 *   {"uid": N, "gid": N, "stdout": "/abs/path", "stderr": "/abs/path", ...}
 * (a missing "stdout"/"stderr" means ATTEMPT_DIR/stdout or /stderr, where the
 * shim writes by default). A log file is opened O_RDONLY|O_NOCTTY|O_NONBLOCK
 * (by the config's open function: in the agent, the privileged half's
 * priv_log_open) on a worker thread, and checked: a regular file owned by
 * that uid, or 403, so that a job cannot point its output at a file it does not own
 * (root's, say, through a symbolic link) and read it through the agent. A log
 * file that does not exist yet reads as empty; so does, for a follow (and
 * its HEAD), a default log the shim has created but not yet given to the
 * job's user (root's, empty, while the attempt runs): the follow waits for
 * it.
 *
 * Query: stream (default stdout); offset, bytes from the start (default 0),
 * or -N for the last N bytes; follow=1 (or 0; also true/false). Unknown
 * parameters and bad values are 400 invalid_query naming the parameter; an
 * attempt this node does not have is 404 not_found naming it.
 *
 * Without follow: 200 text/plain with the bytes from offset to the file's end
 * at the time of the request, and X-Log-Size: that size in bytes. With
 * follow: 200 text/plain, streamed (chunked): the bytes from offset on, then
 * new ones as they are written; the stream ends once ATTEMPT_DIR/status exists
 * (the attempt ended) and everything the file then holds was sent, or when
 * the attempt's directory is removed. At most LOGSRV_MAX_FOLLOW follow
 * streams at once: 503 too_many_streams (Retry-After: 1) over that.
 *
 * Growth is found with inotify (IN_MODIFY on the files, IN_CREATE and
 * IN_MOVED_TO on the attempt's directory, for the status file and a log file
 * not created yet) by one watcher thread for all streams, which also wakes
 * every stream once per LOGSRV_TICK_MS (a client that left is noticed then,
 * and a missed event costs at most that); where inotify is unavailable or a
 * watch could not be added, every LOGSRV_FALLBACK_MS.
 *
 * Errors: functions return 0 or a negative LOGSRV_* code, with one line in
 * the caller's `err` buffer (errlen bytes; may be NULL/0) where they take one.
 * Nothing here logs or exits.
 */
#ifndef GPUORCH_AGENT_LOGSRV_H
#define GPUORCH_AGENT_LOGSRV_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "base/err.h"
#include "http/http.h"

#define LOGSRV_MAX_FOLLOW    256u  /* follow streams at once */
#define LOGSRV_MAX_OPENS     64u   /* log files being opened at once (503 over it) */
#define LOGSRV_TICK_MS       1000  /* every follow stream is woken this often */
#define LOGSRV_FALLBACK_MS   250   /* ... and this often without inotify */
#define LOGSRV_ATTEMPT_MAX   65536 /* bytes of an attempt.json */
#define LOGSRV_STATE_DIR_MAX 3900  /* bytes of the state directory's path */
#define LOGSRV_ATTEMPTS_DIR  "attempts"
#define LOGSRV_ATTEMPT_FILE  "attempt.json"
#define LOGSRV_STATUS_FILE   "status"
#define LOGSRV_SIZE_HEADER   "X-Log-Size"
#define LOGSRV_CONTENT_TYPE  "text/plain"

/*
 * Opens attempt (job, attempt)'s log `stream` ("stdout" or "stderr"), at
 * path as its attempt.json names it, for reading (O_NONBLOCK,
 * close-on-exec), checked to be a regular file owned by uid: 0 and
 * *ret_fd (taken by the server) and *ret_size; GPO_ENOENT (not there
 * yet); GPO_EPERM or GPO_EACCES (not the job's file: 403); GPO_ETIMEDOUT
 * (503); another code (500). Called on a worker thread, never the polling
 * thread: it may block, but must return in bounded time (logsrv_free
 * waits for the opens in flight).
 */
typedef int (*logsrv_open_fn)(void *ctx, int64_t job, int64_t attempt, const char *stream,
                              const char *path, uid_t uid, int *ret_fd, int64_t *ret_size);

struct logsrv_config {
    const char *bind_addr; /* address literal; NULL: 127.0.0.1 */
    uint16_t port;         /* 0: an ephemeral port (logsrv_port) */
    const char *state_dir; /* the agent's state directory */
    const char *token;     /* NULL or "": every request is 401 until logsrv_set_token */
    logsrv_open_fn open;   /* NULL: the server opens and checks the file itself */
    void *open_ctx;        /* borrowed, passed to open */
    /* More routes on the same port (the step server's: steps.h), copied;
     * each must be HTTP_ROUTE_PUBLIC and check its own credential. */
    const struct http_route *extra_routes;
    size_t nextra;
};

struct logsrv;

/*
 * Starts a log server on cfg (strings copied): binds, listens, starts the
 * HTTP threads and the watcher. Returns 0 and *ret (caller frees with
 * logsrv_free); GPO_EINVAL (no state_dir or one of over
 * LOGSRV_STATE_DIR_MAX bytes, a token of over HTTP_TOKEN_MAX bytes or not of
 * bearer characters), GPO_EIO (bind, listen: the message says which),
 * GPO_EIO, GPO_ENOMEM.
 */
int logsrv_new(const struct logsrv_config *cfg, struct logsrv **ret, char *err, size_t errlen);

/* The bound port. */
uint16_t logsrv_port(const struct logsrv *l);

/* Replaces the token (copied; NULL or "": none), from any thread, for the
 * requests that arrive from then on. 0 or GPO_EINVAL (as in logsrv_new). */
int logsrv_set_token(struct logsrv *l, const char *token);

/* Stops serving (open streams are cut), joins the threads and frees l; NULL
 * is fine. */
void logsrv_free(struct logsrv *l);

#endif

/*
 * runpty.c - an interactive job step's client (runpty.h): raw mode, the
 * output stream's thread, the input loop.
 */
#define _GNU_SOURCE
#include "cli/runpty.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "util/fsutil.h"
#include "util/httpc.h"
#include "util/stepframe.h"
#include "base/banned.h"

#define PTY_404_TRIES 150 /* 30 s of "not running here yet" */
#define PTY_SESSION   32  /* hex digits of the session's name */

struct pty_run {
    const struct runpty *p;
    char *body;
    char path[160], url[HTTPC_URL_MAX];
    long status;
    struct stepframe_reader frames;
    char answer[512]; /* a non-200 answer's start */
    size_t alen;
    bool exited, bad;
    int32_t exit_status, exit_signal;
    char *error; /* an ERROR frame's text, owned */
    char err[CLI_ERR_MAX];
    volatile sig_atomic_t done; /* the stream ended */
    int wake[2];                /* the stream's end, SIGWINCH: the input loop wakes */
};

/* The terminal as it was, restored at every exit (atexit too, for an exit
 * from elsewhere while raw). */
static struct termios saved;
static volatile sig_atomic_t raw_on;
static int winch_fd = -1;

static void restore(void)
{
    if (raw_on) {
        (void)tcsetattr(0, TCSAFLUSH, &saved);
        raw_on = 0;
    }
}

static void on_winch(int sig)
{
    (void)sig;
    int e = errno;
    if (winch_fd >= 0 && write(winch_fd, "w", 1) < 0) { /* full: a wake is pending */
    }
    errno = e;
}

static void make_raw(void)
{
    struct termios t;
    if (!isatty(0) || tcgetattr(0, &saved) != 0)
        return;
    t = saved;
    cfmakeraw(&t);
    static bool registered;
    if (!registered)
        registered = atexit(restore) == 0;
    if (tcsetattr(0, TCSAFLUSH, &t) == 0)
        raw_on = 1;
}

static int take_frame(void *ctx, const struct stepframe *f, const uint8_t *data)
{
    struct pty_run *r = ctx;
    if (stepframe_is_input(f->type))
        return GPO_EINVAL;
    if (f->type == STEPFRAME_STDOUT || f->type == STEPFRAME_STDERR) {
        (void)fsutil_write_all(f->type == STEPFRAME_STDOUT ? 1 : 2, data, f->len);
    } else if (f->type == STEPFRAME_EXIT && !r->exited && !r->error) {
        r->exited = true;
        stepframe_exit_read(data, &r->exit_status, &r->exit_signal);
    } else if (f->type == STEPFRAME_ERROR && !r->exited && !r->error) {
        r->error = strndup((const char *)data, f->len);
    }
    return 0;
}

static int on_data(const void *data, size_t len, void *ctx)
{
    struct pty_run *r = ctx;
    if (*r->p->stop)
        return 1;
    if (r->status != 200) {
        size_t room = sizeof(r->answer) - 1 - r->alen, n = len < room ? len : room;
        memcpy(r->answer + r->alen, data, n);
        r->alen += n;
        r->answer[r->alen] = '\0';
        return 0;
    }
    r->bad = r->bad || stepframe_reader_feed(&r->frames, data, len, take_frame, r) != 0;
    return r->bad;
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The output stream's thread: asked again on 404 (the node's agent may not
 * have started its part of a job that just began). */
static void *stream_main(void *arg)
{
    struct pty_run *r = arg;
    struct httpc *h = NULL;
    int rc = httpc_new(r->url, r->p->key, &h, r->err, sizeof(r->err));
    for (int tries = 0; !rc; tries++) {
        r->status = 0;
        r->alen = 0;
        r->answer[0] = '\0';
        rc = httpc_stream_body(h, "POST", r->path, r->body, strlen(r->body), 0, on_data, r,
                               &r->status, r->err, sizeof(r->err));
        if (rc || r->status != 404 || *r->p->stop || tries >= PTY_404_TRIES)
            break;
        nap_ms(200);
    }
    if (!rc && r->status != 200) {
        json_t *o = json_loads(r->answer, 0, NULL);
        const char *m = cli_json_str(json_object_get(o, "error"), "message");
        snprintf(r->err, sizeof(r->err), "its agent answered %ld: %s", r->status,
                 m ? m : r->answer);
        json_decref(o);
    } else if (!rc && r->bad) {
        snprintf(r->err, sizeof(r->err), "its agent sent a frame that does not parse");
    } else if (!rc) {
        r->err[0] = '\0';
    }
    httpc_free(h);
    r->done = 1;
    if (write(r->wake[1], "d", 1) < 0) { /* full: the loop wakes anyway */
    }
    return NULL;
}

static void frame(uint8_t *out, enum stepframe_type type, const void *data, size_t n)
{
    stepframe_head(&(struct stepframe){.type = type, .len = (uint32_t)n}, out);
    if (n)
        memcpy(out + STEPFRAME_HEAD, data, n);
}

static bool window(uint16_t *rows, uint16_t *cols)
{
    struct winsize ws;
    if (ioctl(0, TIOCGWINSZ, &ws) != 0 || !ws.ws_row || !ws.ws_col)
        return false;
    *rows = ws.ws_row;
    *cols = ws.ws_col;
    return true;
}

/* The input's sender: frames, in order, one request at a time. */
struct input {
    struct pty_run *r;
    struct httpc *h;
    char path[256];
    bool broken; /* input can no longer go: the loop only waits */
};

/* Sends frames to the step's input; asked again while the step is not
 * there yet (404) or its input is full (503). */
static void put(struct input *in, const uint8_t *data, size_t len)
{
    for (int tries = 0; !in->broken && !in->r->done && !*in->r->p->stop; tries++) {
        struct httpc_response resp = {0};
        int rc =
            httpc_request(in->h, "POST", in->path, (const char *)data, len, 30000, &resp, NULL, 0);
        long st = rc ? 0 : resp.status;
        httpc_response_release(&resp);
        if (st == 204)
            return;
        if ((st != 404 && st != 503) || tries >= PTY_404_TRIES)
            in->broken = true;
        else
            nap_ms(st == 404 ? 50 : 20);
    }
}

/* This terminal's size to the task (after a SIGWINCH). */
static void send_window(struct input *in)
{
    uint16_t rows, cols;
    if (window(&rows, &cols)) {
        uint8_t ws[4], f[STEPFRAME_HEAD + sizeof(ws)];
        stepframe_winsize_data(rows, cols, ws);
        frame(f, STEPFRAME_WINSIZE, ws, sizeof(ws));
        put(in, f, sizeof(f));
    }
}

/* Our stdin ended: a terminal of ours hung up, and so does the task's; a
 * file or pipe's end is the terminal's end-of-file character (VEOF), as at
 * the start of a line typed there. */
static void eof_input(struct input *in)
{
    uint8_t f[STEPFRAME_HEAD + 1];
    bool tty = isatty(0);
    frame(f, tty ? STEPFRAME_HANGUP : STEPFRAME_STDIN, "\004", tty ? 0 : 1);
    put(in, f, tty ? STEPFRAME_HEAD : sizeof(f));
}

/* The input loop: stdin and window changes to the task, until the stream
 * ends or *stop. */
static void input_loop(struct pty_run *r, struct input *in)
{
    bool eof = false;
    uint8_t buf[STEPFRAME_HEAD + 4096];
    while (!r->done && !*r->p->stop) {
        struct pollfd p[2] = {{.fd = eof || in->broken ? -1 : 0, .events = POLLIN},
                              {.fd = r->wake[0], .events = POLLIN}};
        if (poll(p, 2, 1000) < 0 && errno != EINTR)
            break;
        if (p[1].revents) {
            char drain[64];
            (void)read(r->wake[0], drain, sizeof(drain));
            if (!r->done)
                send_window(in);
        }
        if (p[0].revents) {
            ssize_t n = read(0, buf + STEPFRAME_HEAD, sizeof(buf) - STEPFRAME_HEAD);
            if (n < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (n <= 0) {
                eof_input(in);
                eof = true;
                continue;
            }
            stepframe_head(&(struct stepframe){.type = STEPFRAME_STDIN, .len = (uint32_t)n}, buf);
            put(in, buf, STEPFRAME_HEAD + (size_t)n);
        }
    }
}

static int outcome(struct pty_run *r)
{
    const struct runpty *p = r->p;
    if (*p->stop)
        return fprintf(stderr, "gpuorch %s: %s: the step's task was ended\n", p->cmd,
                       strsignal(*p->stop)),
               128 + *p->stop;
    if (r->error)
        return fprintf(stderr, "gpuorch %s: %s\n", p->cmd, r->error), 1;
    if (!r->exited)
        return fprintf(stderr, "gpuorch %s: task 0 (node %s): no status: %s\n", p->cmd, p->node,
                       r->err[0] ? r->err : "its agent's stream ended"),
               1;
    return r->exit_signal ? 128 + r->exit_signal : r->exit_status;
}

/* The request's interactive fields: 0, or GPO_ENOMEM. */
static int add_fields(json_t *body, const char *session)
{
    uint16_t rows = 0, cols = 0;
    bool ok = json_object_set_new(body, "pty", json_true()) == 0 &&
              json_object_set_new(body, "session", json_string(session)) == 0;
    if (ok && window(&rows, &cols))
        ok = json_object_set_new(body, "rows", json_integer(rows)) == 0 &&
             json_object_set_new(body, "cols", json_integer(cols)) == 0;
    return ok ? 0 : GPO_ENOMEM;
}

int runpty_run(const struct runpty *p, json_t *body)
{
    uint8_t rnd[PTY_SESSION / 2];
    char session[PTY_SESSION + 1];
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        return cli_fail(p->cmd, "getrandom: %s", strerror(errno));
    for (size_t k = 0; k < sizeof(rnd); k++)
        snprintf(session + 2 * k, 3, "%02x", rnd[k]);
    struct pty_run *r = calloc(1, sizeof(*r));
    if (!r)
        return cli_fail(p->cmd, "out of memory");
    r->p = p;
    snprintf(r->url, sizeof(r->url), "http://%s", p->addr);
    snprintf(r->path, sizeof(r->path), "/v1/steps/%" PRIu64 "/%" PRIu32, p->job, p->attempt);
    struct input in = {.r = r};
    snprintf(in.path, sizeof(in.path), "%s/input/%s", r->path, session);
    int rc = add_fields(body, session);
    if (!rc && !(r->body = json_dumps(body, JSON_COMPACT)))
        rc = GPO_ENOMEM;
    if (!rc && pipe2(r->wake, O_CLOEXEC | O_NONBLOCK) != 0)
        rc = -errno;
    if (!rc)
        rc = httpc_new(r->url, p->key, &in.h, NULL, 0);
    if (rc) {
        free(r->body);
        free(r);
        httpc_free(in.h);
        return cli_fail(p->cmd, "%s", gpo_strerror(rc));
    }
    winch_fd = r->wake[1];
    struct sigaction sa = {.sa_handler = on_winch, .sa_flags = SA_RESTART}, old;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGWINCH, &sa, &old);
    pthread_t th;
    make_raw();
    if (pthread_create(&th, NULL, stream_main, r) != 0) {
        r->done = 1;
        snprintf(r->err, sizeof(r->err), "pthread_create failed");
    } else {
        input_loop(r, &in);
        pthread_join(th, NULL);
    }
    restore();
    sigaction(SIGWINCH, &old, NULL);
    winch_fd = -1;
    rc = outcome(r);
    httpc_free(in.h);
    close(r->wake[0]);
    close(r->wake[1]);
    free(r->error);
    free(r->body);
    free(r);
    return rc;
}

/*
 * logsrv_int.h - the log server's own state (logsrv.h), shared by
 * logsrv.c (requests, opens, follow streams, life) and logsrv_watch.c (the
 * watcher thread that wakes follow streams). Not for other modules.
 */
#ifndef GPUORCH_AGENT_LOGSRV_INT_H
#define GPUORCH_AGENT_LOGSRV_INT_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "agent/logsrv.h"
#include "http/http.h"

/* An attempt's directory: room for a file name after it within PATH_MAX. */
#define DIR_MAX (PATH_MAX - 64)
/* Room for "/attempts/JOB.ATTEMPT" after the state directory. */
_Static_assert(LOGSRV_STATE_DIR_MAX + 64 < DIR_MAX, "a state directory leaves room");

/* What a request asked for. */
struct logq {
    int64_t job, attempt;
    const char *stream; /* "stdout" or "stderr" */
    int64_t offset;     /* negative: from the end */
    bool follow, head;
};

/* One follow stream. Its references: MHD's (until follow_free) and one per
 * open in flight; the last one frees it. */
struct follow {
    struct logsrv *l;
    struct http_stream *st; /* our handle; NULL until registered */
    struct logq q;
    uid_t uid;
    off_t pos; /* the next byte to send; the polling thread's */
    /* under l->mu: */
    int fd;              /* the log file; -1 until it exists */
    int wd_file, wd_dir; /* inotify watches; -1: none */
    int refs;
    bool listed;    /* in l->follows */
    bool closed;    /* MHD is done with it */
    bool opening;   /* an open runs on a worker */
    bool broken;    /* an open found a file that is not the job's: the stream is cut */
    bool last_look; /* an open started after the attempt ended */
    struct follow *prev, *next;
    char path[PATH_MAX];   /* the log file */
    char dir[DIR_MAX];     /* the attempt's directory */
    char status[PATH_MAX]; /* its status file */
};

struct logsrv {
    struct http_server *http;
    char *state_dir;
    int ifd; /* inotify; -1 when unavailable */
    int efd; /* eventfd: wakes the watcher (quit, a stream without watches) */
    pthread_t watcher;
    bool mu_init, watcher_started;
    pthread_mutex_t mu;
    /* under mu: */
    char token[HTTP_TOKEN_MAX + 1];
    size_t toklen;
    struct follow *follows;
    size_t nfollow;   /* listed in follows */
    size_t nstarting; /* past the cap's check, not listed yet: they hold a slot */
    bool quit;
    unsigned nopen;      /* opens running on workers */
    bool stopping;       /* no new open starts */
    pthread_cond_t idle; /* nopen fell */
    bool idle_init;
    logsrv_open_fn open;
    void *open_ctx;
    struct http_route *routes; /* the log route, then the config's extra ones */
};

/* The watcher thread (logsrv_watch.c): wakes every follow stream once per
 * LOGSRV_TICK_MS (LOGSRV_FALLBACK_MS while some stream has no watch) and
 * those whose files inotify names, until l->quit. arg is l. */
void *logsrv_watcher_main(void *arg);

#endif

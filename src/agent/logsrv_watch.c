/*
 * logsrv_watch.c - the log server's watcher thread (logsrv_int.h): it takes
 * references to the streams it wakes under the lock and wakes them after
 * letting go of it, since a wake calls into MHD and MHD calls follow_free
 * with its own locks held.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "agent/logsrv_int.h"
#include "util/monotime.h"
#include "base/banned.h"

#define MAX_EVENT_WDS 64 /* distinct watches one batch of events names; more: wake all */

/* Wakes every follow stream (all) or those with a watch in wds. */
static void wake_streams(struct logsrv *l, bool all, const int *wds, size_t nwd)
{
    struct http_stream *list[LOGSRV_MAX_FOLLOW];
    size_t n = 0;
    pthread_mutex_lock(&l->mu);
    for (struct follow *f = l->follows; f && n < LOGSRV_MAX_FOLLOW; f = f->next) {
        bool hit = all;
        for (size_t i = 0; !hit && i < nwd; i++)
            hit = f->wd_file == wds[i] || f->wd_dir == wds[i];
        if (hit) {
            http_stream_ref(f->st);
            list[n++] = f->st;
        }
    }
    pthread_mutex_unlock(&l->mu);
    for (size_t i = 0; i < n; i++) {
        http_stream_wake(list[i]);
        http_stream_release(list[i]);
    }
}

/* Reads the pending inotify events into wds; false when they were too many
 * to name (the queue overflowed, or more than MAX_EVENT_WDS watches). */
static bool read_events(int ifd, int *wds, size_t *nwd)
{
    union {
        struct inotify_event ev;
        char bytes[4096];
    } buf;
    bool named = true;
    ssize_t len;
    while ((len = read(ifd, buf.bytes, sizeof(buf.bytes))) > 0) {
        for (size_t at = 0; at + sizeof(struct inotify_event) <= (size_t)len;) {
            struct inotify_event ev;
            memcpy(&ev, buf.bytes + at, sizeof(ev));
            at += sizeof(ev) + ev.len;
            if (ev.mask & IN_Q_OVERFLOW)
                named = false;
            size_t i = 0;
            while (i < *nwd && wds[i] != ev.wd)
                i++;
            if (i == *nwd && *nwd < MAX_EVENT_WDS)
                wds[(*nwd)++] = ev.wd;
            else if (i == *nwd)
                named = false;
        }
    }
    return named;
}

void *logsrv_watcher_main(void *arg)
{
    struct logsrv *l = arg;
    int64_t last_tick = monotime_ms();
    for (;;) {
        pthread_mutex_lock(&l->mu);
        bool quit = l->quit, unwatched = l->ifd < 0;
        for (const struct follow *f = l->follows; f && !unwatched; f = f->next)
            unwatched = f->wd_dir < 0 || (f->fd >= 0 && f->wd_file < 0);
        pthread_mutex_unlock(&l->mu);
        if (quit)
            break;
        int64_t period = unwatched ? LOGSRV_FALLBACK_MS : LOGSRV_TICK_MS;
        int64_t left = last_tick + period - monotime_ms();
        struct pollfd p[2] = {{.fd = l->efd, .events = POLLIN}, {.fd = l->ifd, .events = POLLIN}};
        int n = poll(p, l->ifd >= 0 ? 2 : 1, left > 0 ? (int)left : 0);
        if (n > 0 && (p[0].revents & POLLIN)) {
            uint64_t v;
            ssize_t r = read(l->efd, &v, sizeof(v));
            (void)r;
        }
        int wds[MAX_EVENT_WDS];
        size_t nwd = 0;
        bool all = false;
        if (n > 0 && l->ifd >= 0 && (p[1].revents & POLLIN))
            all = !read_events(l->ifd, wds, &nwd);
        if (monotime_ms() - last_tick >= period) {
            all = true;
            last_tick = monotime_ms();
        }
        if (all || nwd)
            wake_streams(l, all, wds, nwd);
    }
    return NULL;
}

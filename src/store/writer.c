/*
 * writer.c - the store's writer thread and its group commit, for every
 * backend (backend.h): a queue of batches under one lock, a thread that
 * takes the whole queue at once and has the backend run it as one
 * transaction, and pauses for tests and maintenance.
 *
 * Decisions the header leaves open:
 *  - Completions run after the group's transaction, in queue order, without
 *    any lock held.
 *  - Closing commits what is queued (a normal group) rather than failing it:
 *    that is what its callers asked for, and it costs one transaction.
 *    Closing overrides a pause.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/err.h"
#include "store/backend.h"
#include "base/banned.h"

int store_writer_init(struct store_writer *w, store_group_fn run, void *backend)
{
    memset(w, 0, sizeof(*w));
    w->run = run;
    w->backend = backend;
    w->tail = &w->head;
    if (pthread_mutex_init(&w->lock, NULL))
        return GPO_ENOMEM;
    if (pthread_cond_init(&w->wake, NULL)) {
        pthread_mutex_destroy(&w->lock);
        return GPO_ENOMEM;
    }
    if (pthread_cond_init(&w->idle, NULL)) {
        pthread_cond_destroy(&w->wake);
        pthread_mutex_destroy(&w->lock);
        return GPO_ENOMEM;
    }
    w->locks_ready = true;
    return 0;
}

/* The backend runs the group; then it is counted and completed. */
static void run_group(struct store_writer *w, struct store_batch *group)
{
    w->run(w->backend, group);
    uint64_t n = 0, nfailed = 0;
    for (struct store_batch *b = group; b; b = b->next, n++)
        nfailed += b->err != 0;
    pthread_mutex_lock(&w->lock);
    w->stats.transactions++;
    w->stats.batches += n;
    w->stats.batches_failed += nfailed;
    pthread_mutex_unlock(&w->lock);
    for (struct store_batch *b = group, *next; b; b = next) {
        next = b->next;
        store_batch_complete(b);
    }
}

static void *writer_main(void *arg)
{
    struct store_writer *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (!w->closing && (w->pauses > 0 || !w->head))
            pthread_cond_wait(&w->wake, &w->lock);
        if (!w->head)
            break; /* closing, and nothing left */
        struct store_batch *group = w->head;
        w->head = NULL;
        w->tail = &w->head;
        w->stats.queued = 0;
        w->busy = true;
        pthread_mutex_unlock(&w->lock);
        run_group(w, group);
        pthread_mutex_lock(&w->lock);
        w->busy = false;
        pthread_cond_broadcast(&w->idle);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

int store_writer_start(struct store_writer *w)
{
    if (pthread_create(&w->thread, NULL, writer_main, w) != 0)
        return GPO_ENOMEM;
    w->started = true;
    return 0;
}

int store_writer_commit(struct store_writer *w, struct store_batch *b, store_done_fn done,
                        void *ctx)
{
    pthread_mutex_lock(&w->lock);
    if (w->closing) {
        pthread_mutex_unlock(&w->lock);
        return GPO_ESHUTDOWN;
    }
    b->next = NULL;
    b->done = done;
    b->ctx = ctx;
    *w->tail = b;
    w->tail = &b->next;
    w->stats.queued++;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    return 0;
}

void store_writer_stats(struct store_writer *w, struct store_stats *ret)
{
    pthread_mutex_lock(&w->lock);
    *ret = w->stats;
    pthread_mutex_unlock(&w->lock);
}

void store_writer_pause(struct store_writer *w)
{
    pthread_mutex_lock(&w->lock);
    w->pauses++;
    while (w->busy)
        pthread_cond_wait(&w->idle, &w->lock);
    pthread_mutex_unlock(&w->lock);
}

void store_writer_resume(struct store_writer *w)
{
    pthread_mutex_lock(&w->lock);
    if (w->pauses > 0)
        w->pauses--;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
}

void store_writer_release(struct store_writer *w)
{
    if (w->started) {
        pthread_mutex_lock(&w->lock);
        w->closing = true;
        pthread_cond_signal(&w->wake);
        pthread_mutex_unlock(&w->lock);
        pthread_join(w->thread, NULL);
        w->started = false;
    }
    if (w->locks_ready) {
        pthread_cond_destroy(&w->idle);
        pthread_cond_destroy(&w->wake);
        pthread_mutex_destroy(&w->lock);
        w->locks_ready = false;
    }
}

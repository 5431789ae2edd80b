/*
 * fence.c - the agent's fence: the lease, its file, its thread (fence.h).
 *
 * DIR/fence:
 *   {"lease_ms":L,"grace_ms":G,"boot_id":"...","answered_ms":M}
 * M is CLOCK_MONOTONIC's, which counts from the boot that boot_id names.
 */
#include "agent/fence.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "proto/proto.h"
#include "util/errbuf.h"
#include "util/fsutil.h"
#include "util/jsonv.h"
#include "util/monotime.h"
#include "base/banned.h"

/* The longest round of the fence thread. */
#define ROUND_MS 100

struct fence {
    struct fence_config cfg;
    char *path, *tmp;
    char boot[MONOTIME_BOOT_ID_MAX + 1];
    _Atomic int64_t lease_ms, grace_ms, answered_ms;
    atomic_bool fenced;
    /* The fence thread's own. */
    int64_t unreached_ms; /* at the start of this fence */
    int64_t fenced_at_ms; /* when it started */
    char reason[96];
    /* DIR/fence as last written; under write_lock. */
    pthread_mutex_t write_lock;
    int64_t saved_lease, saved_grace, saved_answered;
    bool saved, save_failing;
    pthread_t thread;
    bool started;
    atomic_bool stop;
};

static void nolog(const char *fmt, ...)
{
    (void)fmt;
}

struct fence_file {
    int64_t lease_ms, grace_ms, answered_ms;
    char *boot_id;
};

static const struct jsonv_field file_fields[] = {
    {.name = "lease_ms",
     .kind = JSONV_INT64,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct fence_file, lease_ms),
     .min = 0,
     .max = PROTO_FENCE_MS_MAX},
    {.name = "grace_ms",
     .kind = JSONV_INT64,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct fence_file, grace_ms),
     .min = 0,
     .max = PROTO_FENCE_MS_MAX},
    {.name = "boot_id",
     .kind = JSONV_STRING,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct fence_file, boot_id),
     .min = 0,
     .max = MONOTIME_BOOT_ID_MAX},
    {.name = "answered_ms",
     .kind = JSONV_INT64,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct fence_file, answered_ms),
     .min = 0,
     .max = INT64_MAX},
};

/* DIR/fence into f's state; none is no lease. */
static int load(struct fence *f, int64_t now_ms, char *err, size_t errlen)
{
    atomic_store(&f->answered_ms, now_ms);
    json_error_t je;
    json_t *o = json_load_file(f->path, JSON_REJECT_DUPLICATES, &je);
    if (!o && access(f->path, F_OK) != 0 && errno == ENOENT)
        return 0;
    if (!o)
        return errbuf_set(err, errlen, GPO_ECORRUPT, "%s: %s", f->path, je.text);
    struct fence_file ff = {0};
    char why[256];
    int rc = jsonv_decode(o, file_fields, sizeof(file_fields) / sizeof(file_fields[0]), &ff, why,
                          sizeof(why));
    json_decref(o);
    if (rc == GPO_ENOMEM)
        return errbuf_set(err, errlen, rc, "out of memory");
    if (rc)
        return errbuf_set(err, errlen, GPO_ECORRUPT, "%s: %s", f->path, why);
    atomic_store(&f->lease_ms, ff.lease_ms);
    atomic_store(&f->grace_ms, ff.grace_ms);
    /* Another boot's clock, or one ahead of ours: from now. */
    if (strcmp(ff.boot_id, f->boot) == 0 && ff.answered_ms <= now_ms)
        atomic_store(&f->answered_ms, ff.answered_ms);
    f->saved_lease = ff.lease_ms;
    f->saved_grace = ff.grace_ms;
    f->saved_answered = ff.answered_ms;
    f->saved = true;
    free(ff.boot_id);
    if (ff.lease_ms)
        f->cfg.log("fence: lease %" PRId64 " ms, grace %" PRId64 " ms, as the last run had them; "
                   "no heartbeat answered for %" PRId64 " ms",
                   ff.lease_ms, ff.grace_ms, now_ms - atomic_load(&f->answered_ms));
    return 0;
}

int fence_new(const struct fence_config *cfg, int64_t now_ms, struct fence **ret, char *err,
              size_t errlen)
{
    struct fence *f = calloc(1, sizeof(*f));
    if (!f)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    f->cfg = *cfg;
    if (!f->cfg.log)
        f->cfg.log = nolog;
    size_t n = strlen(cfg->dir) + sizeof("/fence.tmp");
    f->path = malloc(n);
    f->tmp = malloc(n);
    pthread_mutex_init(&f->write_lock, NULL);
    if (!f->path || !f->tmp) {
        fence_free(f);
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    }
    snprintf(f->path, n, "%s/" FENCE_FILE, cfg->dir);
    snprintf(f->tmp, n, "%s/" FENCE_FILE ".tmp", cfg->dir);
    if (cfg->boot_id)
        snprintf(f->boot, sizeof(f->boot), "%s", cfg->boot_id);
    else
        monotime_boot_id(f->boot);
    f->cfg.boot_id = NULL; /* borrowed: not kept */
    int rc = load(f, now_ms, err, errlen);
    if (rc) {
        fence_free(f);
        return rc;
    }
    *ret = f;
    return 0;
}

void fence_free(struct fence *f)
{
    if (!f)
        return;
    if (f->started) {
        atomic_store(&f->stop, true);
        pthread_join(f->thread, NULL);
    }
    pthread_mutex_destroy(&f->write_lock);
    free(f->path);
    free(f->tmp);
    free(f);
}

/* Writes the state to DIR/fence (a temp file renamed over it: a crash
 * leaves the old one or the new one). No fsync: a job outlives an agent's
 * crash, not the machine's. Under write_lock. */
static int write_file(struct fence *f, int64_t lease, int64_t grace, int64_t answered)
{
    json_t *o =
        json_pack("{s:I, s:I, s:s, s:I}", "lease_ms", (json_int_t)lease, "grace_ms",
                  (json_int_t)grace, "boot_id", f->boot, "answered_ms", (json_int_t)answered);
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    if (!text)
        return GPO_ENOMEM;
    int fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int rc = fd < 0 ? -errno : fsutil_write_all(fd, text, strlen(text));
    if (fd >= 0 && close(fd) != 0 && !rc)
        rc = -errno;
    if (!rc && rename(f->tmp, f->path) != 0)
        rc = -errno;
    free(text);
    return rc;
}

/* Saves the state when it differs from the file's (the time only once it
 * is FENCE_SAVE_EVERY_MS later). */
static void save(struct fence *f)
{
    pthread_mutex_lock(&f->write_lock);
    int64_t lease = atomic_load(&f->lease_ms), grace = atomic_load(&f->grace_ms),
            answered = atomic_load(&f->answered_ms);
    bool due = !f->saved || lease != f->saved_lease || grace != f->saved_grace ||
               answered - f->saved_answered >= FENCE_SAVE_EVERY_MS;
    /* Without a lease, and none on disk, there is nothing to keep. */
    if (due && !lease && !f->saved)
        due = false;
    int rc = due ? write_file(f, lease, grace, answered) : 0;
    if (due && !rc) {
        f->saved_lease = lease;
        f->saved_grace = grace;
        f->saved_answered = answered;
        f->saved = true;
        if (f->save_failing)
            f->cfg.log("fence: %s written again", f->path);
        f->save_failing = false;
    } else if (rc && !f->save_failing) {
        f->save_failing = true;
        f->cfg.log("fence: writing %s: %s (a restart may fence late)", f->path, gpo_strerror(rc));
    }
    pthread_mutex_unlock(&f->write_lock);
}

void fence_set(struct fence *f, int64_t lease_ms, int64_t grace_ms)
{
    int64_t was = atomic_exchange(&f->lease_ms, lease_ms);
    atomic_store(&f->grace_ms, grace_ms);
    if (was != lease_ms)
        f->cfg.log(lease_ms ? "fence: lease %" PRId64 " ms, grace %" PRId64
                              " ms (jobs stop when no controller is reached for the lease)"
                            : "fence: off (lease %" PRId64 ", grace %" PRId64 " ms)",
                   lease_ms, grace_ms);
    save(f);
}

void fence_answered(struct fence *f, int64_t sent_ms)
{
    int64_t seen = atomic_load(&f->answered_ms);
    while (sent_ms > seen && !atomic_compare_exchange_weak(&f->answered_ms, &seen, sent_ms)) {
    }
    save(f);
}

int64_t fence_heartbeat_timeout(const struct fence *f)
{
    /* A quarter of the lease: a controller that accepts and never answers
     * (frozen) holds a heartbeat that long at most, and the next one goes to
     * the next controller of the list, well before the lease ends. */
    int64_t lease = atomic_load(&f->lease_ms);
    if (!lease || lease / 4 > 10000)
        return 10000;
    return lease / 4 < 1000 ? 1000 : lease / 4;
}

bool fence_active(const struct fence *f)
{
    return atomic_load(&f->fenced);
}

int64_t fence_check(struct fence *f, int64_t now_ms)
{
    int64_t lease = atomic_load(&f->lease_ms), answered = atomic_load(&f->answered_ms);
    bool out = lease && now_ms - answered >= lease;
    bool fenced = atomic_load(&f->fenced);
    if (out && !fenced) {
        f->unreached_ms = now_ms - answered;
        f->fenced_at_ms = now_ms;
        snprintf(f->reason, sizeof(f->reason), FENCE_REASON_FMT, f->unreached_ms / 1000);
        f->cfg.log("fence: no controller reached for %" PRId64 " ms (lease %" PRId64
                   " ms): stopping every job, taking no new work until a heartbeat is answered",
                   f->unreached_ms, lease);
        atomic_store(&f->fenced, true);
    }
    if (out) {
        if (f->cfg.fence)
            f->cfg.fence(f->cfg.arg, f->reason, f->unreached_ms, atomic_load(&f->grace_ms), now_ms);
        return ROUND_MS;
    }
    if (fenced) {
        atomic_store(&f->fenced, false);
        f->cfg.log("fence: a controller answers again, after %" PRId64
                   " ms fenced: reporting what was fenced, taking new work",
                   now_ms - f->fenced_at_ms);
        if (f->cfg.unfence)
            f->cfg.unfence(f->cfg.arg);
    }
    int64_t left = lease ? answered + lease - now_ms : ROUND_MS;
    return left < 1 ? 1 : left > ROUND_MS ? ROUND_MS : left;
}

static void *fence_main(void *arg)
{
    struct fence *f = arg;
    while (!atomic_load(&f->stop)) {
        int64_t ms = fence_check(f, monotime_ms());
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int fence_start(struct fence *f)
{
    if (pthread_create(&f->thread, NULL, fence_main, f) != 0)
        return GPO_ENOMEM;
    f->started = true;
    return 0;
}

/*
 * shim_fence.c - the shim's reading of the agent's fence file (shim.h,
 * fence.h): libc only, as the rest of the shim. fence.c writes it with
 * jansson, compact and in this order,
 *   {"lease_ms":L,"grace_ms":G,"boot_id":"...","answered_ms":M}
 * and this reads that object and no other: the four members once each, in
 * any order, whitespace between tokens allowed, integers of decimal digits,
 * the boot id a plain string of at most MONOTIME_BOOT_ID_MAX bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/fence.h"
#include "agent/shim.h"
#include "base/banned.h"

/* A fence file is a hundred bytes; more is not the agent's. */
#define FENCE_FILE_MAX 1024

struct cursor {
    const char *p, *end;
};

static void skip_space(struct cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static bool take(struct cursor *c, char ch)
{
    skip_space(c);
    if (c->p >= c->end || *c->p != ch)
        return false;
    c->p++;
    return true;
}

/* A string without escapes into out (len bytes, NUL included). */
static bool string(struct cursor *c, char *out, size_t len)
{
    if (!take(c, '"'))
        return false;
    size_t n = 0;
    while (c->p < c->end && *c->p != '"') {
        unsigned char ch = (unsigned char)*c->p;
        if (ch < 0x20 || ch == '\\' || n + 1 >= len)
            return false;
        out[n++] = (char)ch;
        c->p++;
    }
    out[n] = '\0';
    return take(c, '"');
}

/* A non-negative integer of at most 18 digits. */
static bool integer(struct cursor *c, int64_t *ret)
{
    skip_space(c);
    int64_t v = 0;
    int digits = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        if (++digits > 18)
            return false;
        v = v * 10 + (*c->p - '0');
        c->p++;
    }
    *ret = v;
    return digits > 0;
}

int shim_fence_parse(const char *text, size_t len, struct shim_fence *ret)
{
    struct cursor c = {text, text + len};
    struct shim_fence f = {0};
    unsigned seen = 0;
    if (!take(&c, '{'))
        return GPO_ECORRUPT;
    for (int k = 0; k < 4; k++) {
        char key[32];
        if ((k && !take(&c, ',')) || !string(&c, key, sizeof(key)) || !take(&c, ':'))
            return GPO_ECORRUPT;
        unsigned bit = strcmp(key, "lease_ms") == 0      ? 1u
                       : strcmp(key, "grace_ms") == 0    ? 2u
                       : strcmp(key, "boot_id") == 0     ? 4u
                       : strcmp(key, "answered_ms") == 0 ? 8u
                                                         : 0u;
        if (!bit || (seen & bit))
            return GPO_ECORRUPT;
        seen |= bit;
        bool ok = bit == 1u   ? integer(&c, &f.lease_ms)
                  : bit == 2u ? integer(&c, &f.grace_ms)
                  : bit == 4u ? string(&c, f.boot_id, sizeof(f.boot_id)) && f.boot_id[0]
                              : integer(&c, &f.answered_ms);
        if (!ok)
            return GPO_ECORRUPT;
    }
    if (!take(&c, '}'))
        return GPO_ECORRUPT;
    skip_space(&c);
    if (c.p != c.end)
        return GPO_ECORRUPT;
    *ret = f;
    return 0;
}

int shim_fence_read(const char *path, struct shim_fence *ret)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? GPO_ENOENT : GPO_EIO;
    char buf[FENCE_FILE_MAX + 1];
    size_t len = 0;
    ssize_t n = 0;
    while (len < sizeof(buf) &&
           ((n = read(fd, buf + len, sizeof(buf) - len)) > 0 || (n < 0 && errno == EINTR)))
        len += n > 0 ? (size_t)n : 0;
    close(fd);
    if (n < 0)
        return GPO_EIO;
    if (len > FENCE_FILE_MAX)
        return GPO_ECORRUPT;
    return shim_fence_parse(buf, len, ret);
}

int64_t shim_fence_step(struct shim_watch *w, const struct shim_fence *f, bool have, int64_t now_ms)
{
    if (w->action == SHIM_WATCH_KILL)
        return -1; /* the command is killed: nothing more to time */
    if (w->action == SHIM_WATCH_TERM) {
        if (now_ms < w->kill_at_ms)
            return w->kill_at_ms - now_ms;
        w->action = SHIM_WATCH_KILL;
        return -1;
    }
    /* No lease (no file yet, fencing off, another boot's file, or one that
     * is not the agent's): nothing to keep; a look again in a round. A time
     * ahead of now is not this clock's either. */
    if (!have || f->lease_ms <= 0 || strcmp(f->boot_id, w->boot_id) != 0 || f->answered_ms > now_ms)
        return SHIM_WATCH_ROUND_MS;
    /* The file's time may be up to a save's interval older than the
     * agent's: counted from the newest it may be, the watchdog is never
     * before the agent's own fence, which a live agent then runs itself. */
    int64_t deadline = f->answered_ms + FENCE_SAVE_EVERY_MS + f->lease_ms;
    if (now_ms < deadline) {
        int64_t left = deadline - now_ms;
        return left < SHIM_WATCH_ROUND_MS ? left : SHIM_WATCH_ROUND_MS;
    }
    w->action = SHIM_WATCH_TERM;
    w->unreached_ms = now_ms - f->answered_ms; /* at least the lease */
    w->kill_at_ms = now_ms + (f->grace_ms > 0 ? f->grace_ms : 0);
    return w->kill_at_ms - now_ms;
}

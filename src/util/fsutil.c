/*
 * fsutil.c - write_all and the atomic write (fsutil.h).
 */
/* mkostemp: the temporary file close-on-exec from the start, so that no
 * fork in another thread inherits it (a kept one lives on). */
#define _GNU_SOURCE
#include "util/fsutil.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/errbuf.h"
#include "base/banned.h"

#define TMP_SUFFIX ".tmp.XXXXXX"

int fsutil_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        if (w == 0)
            return GPO_EIO;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int fsutil_fsync_dir(const char *path)
{
    if (!path || !*path)
        return GPO_EINVAL;
    const char *slash = strrchr(path, '/');
    char *dir = !slash          ? strdup(".")
                : slash == path ? strdup("/")
                                : strndup(path, (size_t)(slash - path));
    if (!dir)
        return GPO_ENOMEM;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = fd < 0 ? -errno : 0;
    if (fd >= 0 && fsync(fd) < 0)
        rc = -errno;
    if (fd >= 0)
        close(fd);
    free(dir);
    return rc;
}

/* -errno of the call that failed, with "CALL PATH: reason" in err. */
static int sys_fail(char *err, size_t errlen, const char *call, const char *path, int e)
{
    return errbuf_set(err, errlen, e ? -e : GPO_EIO, "%s %s: %s", call, path,
                      strerror(e ? e : EIO));
}

static void release(struct fsutil_atomic *a)
{
    free(a->path);
    free(a->tmp);
    *a = (struct fsutil_atomic){.fd = -1};
}

int fsutil_atomic_begin(struct fsutil_atomic *a, const char *path, mode_t mode, unsigned flags,
                        char *err, size_t errlen)
{
    *a = (struct fsutil_atomic){.fd = -1, .flags = flags};
    if (!path || !*path)
        return errbuf_set(err, errlen, GPO_EINVAL, "no path to write");
    size_t n = strlen(path) + sizeof(TMP_SUFFIX);
    a->path = strdup(path);
    a->tmp = malloc(n);
    if (!a->path || !a->tmp) {
        release(a);
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    }
    snprintf(a->tmp, n, "%s" TMP_SUFFIX, path);
    int fd = mkostemp(a->tmp, O_CLOEXEC);
    if (fd < 0) {
        int rc = sys_fail(err, errlen, "create", a->tmp, errno);
        release(a);
        return rc;
    }
    a->fd = fd;
    if (fchmod(fd, mode) < 0) {
        int rc = sys_fail(err, errlen, "chmod", a->tmp, errno);
        fsutil_atomic_abort(a);
        return rc;
    }
    return 0;
}

FILE *fsutil_atomic_stream(struct fsutil_atomic *a)
{
    if (!a->stream && a->fd >= 0)
        a->stream = fdopen(a->fd, "w");
    return a->stream;
}

/* Everything written is on disk, and the file closed; with ret_keep, a
 * descriptor of it stays open in *ret_keep (on success only). */
static int flush_close(struct fsutil_atomic *a, int *ret_keep, char *err, size_t errlen)
{
    int rc = 0, keep = -1;
    errno = 0;
    if (a->stream && (fflush(a->stream) != 0 || ferror(a->stream)))
        rc = sys_fail(err, errlen, "write", a->tmp, errno);
    if (rc == 0 && fsync(a->fd) < 0)
        rc = sys_fail(err, errlen, "fsync", a->tmp, errno);
    /* A stream's descriptor goes with it: a duplicate stays. */
    if (rc == 0 && ret_keep && (keep = a->stream ? fcntl(a->fd, F_DUPFD_CLOEXEC, 0) : a->fd) < 0)
        rc = sys_fail(err, errlen, "dup", a->tmp, errno);
    int closed = 0;
    if (a->stream)
        closed = fclose(a->stream);
    else if (keep != a->fd)
        closed = close(a->fd);
    if (closed != 0 && rc == 0)
        rc = sys_fail(err, errlen, "close", a->tmp, errno);
    if (rc != 0 && keep >= 0)
        close(keep);
    a->stream = NULL;
    a->fd = -1;
    if (rc == 0 && ret_keep)
        *ret_keep = keep;
    return rc;
}

/* fsutil_atomic_commit, and with ret_fd fsutil_atomic_commit_keep. */
static int commit(struct fsutil_atomic *a, int *ret_fd, char *err, size_t errlen)
{
    if (!a->tmp)
        return errbuf_set(err, errlen, GPO_EINVAL, "no file being written");
    int keep = -1;
    int rc = flush_close(a, ret_fd ? &keep : NULL, err, errlen);
    bool excl = (a->flags & FSUTIL_EXCL) != 0;
    if (rc == 0 && (excl ? link(a->tmp, a->path) : rename(a->tmp, a->path)) < 0)
        rc = sys_fail(err, errlen, excl ? "link" : "rename", a->path, errno);
    if (rc != 0 || excl)
        unlink(a->tmp); /* after a rename it is gone already */
    if (rc == 0 && (rc = fsutil_fsync_dir(a->path)) != 0) {
        errbuf_set(err, errlen, rc, "fsync of the directory of %s: %s", a->path, strerror(-rc));
        if (excl)
            unlink(a->path); /* we made it, and cannot promise it */
    }
    if (rc == 0 && ret_fd)
        *ret_fd = keep;
    else if (keep >= 0)
        close(keep);
    release(a);
    return rc;
}

int fsutil_atomic_commit(struct fsutil_atomic *a, char *err, size_t errlen)
{
    return commit(a, NULL, err, errlen);
}

int fsutil_atomic_commit_keep(struct fsutil_atomic *a, int *ret_fd, char *err, size_t errlen)
{
    return commit(a, ret_fd, err, errlen);
}

void fsutil_atomic_abort(struct fsutil_atomic *a)
{
    if (!a || !a->tmp)
        return;
    if (a->stream)
        (void)fclose(a->stream); /* the file is discarded: its errors do not matter */
    else if (a->fd >= 0)
        close(a->fd);
    unlink(a->tmp);
    release(a);
}

int fsutil_write_atomic(const char *path, const void *data, size_t len, mode_t mode, unsigned flags,
                        char *err, size_t errlen)
{
    struct fsutil_atomic a;
    int rc = fsutil_atomic_begin(&a, path, mode, flags, err, errlen);
    if (rc)
        return rc;
    if ((rc = fsutil_write_all(a.fd, data, len)) != 0) {
        sys_fail(err, errlen, "write", a.tmp, -rc);
        fsutil_atomic_abort(&a);
        return rc;
    }
    return fsutil_atomic_commit(&a, err, errlen);
}

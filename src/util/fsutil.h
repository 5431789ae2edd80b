/*
 * fsutil.h - writing files so that they hold all that was meant, and only
 * whole: write_all (until every byte is written) and the atomic write (a
 * temporary file in the same directory, fsync, rename or link onto the
 * name, fsync of the directory), written once for every module.
 *
 * Errors: 0 or a negative errno of the call that failed (GPO_EIO for a
 * write that wrote nothing), GPO_ENOMEM, GPO_EINVAL for a NULL or empty
 * path; functions with a caller buffer write one line there: the call, the
 * path and the system's reason ("rename /d/x.tmp.a1B2c3: Permission
 * denied"). Nothing here prints.
 */
#ifndef GPUORCH_UTIL_FSUTIL_H
#define GPUORCH_UTIL_FSUTIL_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "base/err.h"

/* Writes buf[0..len) to fd, again after EINTR and after a short write. 0,
 * or the negative errno of the write that failed (GPO_EIO when one wrote
 * nothing). What was written before a failure stays written. */
int fsutil_write_all(int fd, const void *buf, size_t len);

/* fsync of the directory that holds `path` ("." for a bare name), so that
 * a name just made there survives a crash. 0 or a negative errno. */
int fsutil_fsync_dir(const char *path);

enum fsutil_flag {
    /* The name must not exist: link(2) the file onto it (never replacing
     * one) rather than rename(2); GPO_EEXIST when it does. */
    FSUTIL_EXCL = 1 << 0,
};

/*
 * A file being written under a temporary name beside `path`
 * (PATH.tmp.XXXXXX), that takes the name only once it is whole and on disk.
 * Begin it, write to `fd` (or to fsutil_atomic_stream's FILE), then commit
 * or abort; both release what it holds, and no temporary file stays behind
 * either way. The struct is the caller's; its members are read-only.
 */
struct fsutil_atomic {
    char *path;   /* the name (owned copy) */
    char *tmp;    /* the temporary file's name (owned) */
    int fd;       /* the temporary file; -1 when none is open */
    FILE *stream; /* fsutil_atomic_stream's; NULL until asked for */
    unsigned flags;
};

/*
 * Creates the temporary file with permissions `mode` exactly (the umask
 * does not apply: 0600 for a secret, 0644 for a report) and `flags` (enum
 * fsutil_flag bits) for the commit. 0 and *a; else the error, with *a
 * empty (fd -1) so that abort and commit on it do nothing harmful.
 */
int fsutil_atomic_begin(struct fsutil_atomic *a, const char *path, mode_t mode, unsigned flags,
                        char *err, size_t errlen);

/* A stdio stream over the file (made once, then the same one); NULL when
 * out of memory. commit flushes and closes it. */
FILE *fsutil_atomic_stream(struct fsutil_atomic *a);

/*
 * Flushes the stream if any, fsyncs and closes the file, gives it the name
 * (rename; link with FSUTIL_EXCL) and fsyncs the directory. 0 once the
 * name holds the whole file; else the error, the temporary file removed
 * (with FSUTIL_EXCL, also the new name when only the directory's fsync
 * failed). Releases *a either way.
 */
int fsutil_atomic_commit(struct fsutil_atomic *a, char *err, size_t errlen);

/*
 * fsutil_atomic_commit for a file that is written on once it has its name
 * (the agent's journal after compaction): the same steps, but the file
 * stays open. 0 and *ret_fd, a close-on-exec descriptor of the file now
 * under the name, its offset at the end of what was written (the caller
 * closes it; O_APPEND is the caller's to set). Else commit's error, and
 * nothing stays open: the name holds the old file, or (when only the
 * directory's fsync failed) the new one. Releases *a either way.
 */
int fsutil_atomic_commit_keep(struct fsutil_atomic *a, int *ret_fd, char *err, size_t errlen);

/* Closes and removes the temporary file and releases *a; a zeroed or
 * already released *a, and NULL, are fine. */
void fsutil_atomic_abort(struct fsutil_atomic *a);

/* The whole of data[0..len) into `path` as begin/write/commit do. 0, or
 * their errors. */
int fsutil_write_atomic(const char *path, const void *data, size_t len, mode_t mode, unsigned flags,
                        char *err, size_t errlen);

#endif

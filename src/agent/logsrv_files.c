/*
 * logsrv_files.c - attempt.json, the log file's open and check, a log being
 * created (logsrv_files.h).
 */
#include "agent/logsrv_files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "agent/logsrv.h"
#include "agent/privsrv_check.h"
#include "util/errbuf.h"
#include "base/banned.h"

/* The whole of a small file (NUL-terminated) into *ret (caller frees), and
 * its owner. 0, GPO_ENOENT, -EFBIG, -errno. */
static int read_small(const char *path, size_t max, char **ret, size_t *ret_len, uid_t *ret_owner)
{
    int fd = open(path, O_RDONLY | O_NOCTTY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    char *buf = malloc(max + 1);
    size_t len = 0;
    int rc = !buf ? GPO_ENOMEM : fstat(fd, &st) != 0 ? -errno : 0;
    while (rc == 0 && len <= max) {
        ssize_t n = read(fd, buf + len, max + 1 - len);
        if (n < 0 && errno != EINTR)
            rc = -errno;
        else if (n == 0)
            break;
        else if (n > 0)
            len += (size_t)n;
    }
    close(fd);
    if (rc == 0 && len > max)
        rc = -EFBIG;
    if (rc) {
        free(buf);
        return rc;
    }
    buf[len] = '\0';
    *ret = buf;
    *ret_len = len;
    *ret_owner = st.st_uid;
    return 0;
}

/* From dir/attempt.json: the attempt's uid and the path of `stream`. 0;
 * GPO_ENOENT (no such attempt); GPO_EINVAL with a message (a malformed file, or
 * one the launcher did not write: only root or the agent's own user may own
 * it, since the uid in it decides which files may be read). */
int logsrv_attempt_load(const char *dir, const char *stream, uid_t *ret_uid, char *path,
                        size_t pathlen, char *err, size_t errlen)
{
    char file[PATH_MAX], *text = NULL;
    size_t len = 0;
    uid_t owner = 0;
    snprintf(file, sizeof(file), "%s/%s", dir, LOGSRV_ATTEMPT_FILE);
    int rc = read_small(file, LOGSRV_ATTEMPT_MAX, &text, &len, &owner);
    if (rc == GPO_ENOENT || rc == -ENOTDIR)
        return GPO_ENOENT;
    if (rc)
        return errbuf_set(err, errlen, GPO_EINVAL, "%s: %s", file, gpo_strerror(rc));
    if (owner != 0 && owner != geteuid()) {
        free(text);
        return errbuf_set(err, errlen, GPO_EINVAL, "%s: owned by uid %u, not by root or the agent",
                          file, (unsigned)owner);
    }
    json_error_t je;
    json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    char why[256];
    rc = privsrv_check_attempt_log(o, dir, stream, ret_uid, path, pathlen, why, sizeof(why));
    if (rc)
        errbuf_set(err, errlen, GPO_EINVAL, "%s: %s", file, why);
    json_decref(o);
    return rc;
}

/* Opens a log file for reading and checks it after the open. 0 and *ret_fd,
 * *ret_size; GPO_ENOENT (not there yet); GPO_EPERM (not a regular file owned by
 * uid); -errno. */
int logsrv_file_open(const char *path, uid_t uid, int *ret_fd, int64_t *ret_size)
{
    int fd = open(path, O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOTDIR ? GPO_ENOENT : -errno;
    struct stat st;
    int rc = fstat(fd, &st) != 0                        ? -errno
             : !S_ISREG(st.st_mode) || st.st_uid != uid ? GPO_EPERM
                                                        : 0;
    if (rc) {
        close(fd);
        return rc;
    }
    *ret_fd = fd;
    *ret_size = st.st_size;
    return 0;
}

/*
 * The shim creates a default log file as root and then gives it to the job's
 * user (fchown): a log that is root's, empty, in the attempt's own directory,
 * while the attempt runs (no status file), is one being created, and a
 * follow waits for it rather than refusing it.
 */
bool logsrv_being_created(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    struct stat st;
    char status[PATH_MAX + 32];
    snprintf(status, sizeof(status), "%s/%s", dir, LOGSRV_STATUS_FILE);
    return strncmp(path, dir, n) == 0 && path[n] == '/' && !strchr(path + n + 1, '/') &&
           lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == 0 && st.st_size == 0 &&
           stat(status, &st) != 0;
}

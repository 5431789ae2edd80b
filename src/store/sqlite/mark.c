/*
 * mark.c - the store's mark file (mark.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "store/sqlite/mark.h"
#include "util/errbuf.h"
#include "util/fsutil.h"
#include "base/banned.h"

static size_t mark_format(const struct sq_mark *m, char buf[SQ_MARK_SIZE])
{
    int n = snprintf(buf, SQ_MARK_SIZE,
                     "gpuorch-store-mark 1\nepoch %" PRId64 "\njob_id %" PRId64
                     "\nreserved %" PRId64 "\nwal %" PRIu32 " %" PRIu32 " %" PRIu32 "\n",
                     m->epoch, m->job_id, m->reserved, m->wal.salt1, m->wal.salt2, m->wal.frame);
    size_t used = n > 0 && n < SQ_MARK_SIZE ? (size_t)n : 0;
    /* Padding: the file keeps one size, so a rewrite never leaves an old tail. */
    memset(buf + used, ' ', SQ_MARK_SIZE - used - 1);
    buf[SQ_MARK_SIZE - 1] = '\n';
    return SQ_MARK_SIZE;
}

/* Parsing: the exact text `w` at *p, then past it. */
static bool word(const char **p, const char *w)
{
    size_t n = strlen(w);
    if (strncmp(*p, w, n) != 0)
        return false;
    *p += n;
    return true;
}

/* Decimal digits at *p, 0..max, ended by `end` (then past it). */
static bool number(const char **p, char end, int64_t max, int64_t *ret)
{
    int64_t v = 0;
    const char *q = *p;
    for (; *q >= '0' && *q <= '9'; q++) {
        if (v > (max - (*q - '0')) / 10)
            return false;
        v = v * 10 + (*q - '0');
    }
    if (q == *p || *q != end)
        return false;
    *p = q + 1;
    *ret = v;
    return true;
}

int sq_mark_read(const char *path, struct sq_mark *ret, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        return GPO_ENOENT;
    if (fd < 0)
        return errbuf_set(err, errlen, -errno, "%s: %s", path, strerror(errno));
    char buf[SQ_MARK_SIZE + 1];
    ssize_t n = read(fd, buf, SQ_MARK_SIZE);
    int e = errno;
    close(fd);
    if (n < 0)
        return errbuf_set(err, errlen, -e, "%s: %s", path, strerror(e));
    buf[n] = '\0';
    struct sq_mark m = {0};
    int64_t salt1 = 0, salt2 = 0, frame = 0;
    const char *p = buf;
    bool good = word(&p, "gpuorch-store-mark 1\n") && word(&p, "epoch ") &&
                number(&p, '\n', INT64_MAX, &m.epoch) && word(&p, "job_id ") &&
                number(&p, '\n', INT64_MAX, &m.job_id) && word(&p, "reserved ") &&
                number(&p, '\n', INT64_MAX, &m.reserved) && word(&p, "wal ") &&
                number(&p, ' ', UINT32_MAX, &salt1) && number(&p, ' ', UINT32_MAX, &salt2) &&
                number(&p, '\n', UINT32_MAX, &frame) && strspn(p, " \n") == strlen(p);
    m.wal = (struct sq_wal_pos){(uint32_t)salt1, (uint32_t)salt2, (uint32_t)frame};
    if (!good)
        return errbuf_set(err, errlen, GPO_ECORRUPT,
                          "%s: not a store mark (%zd bytes; expected the lines gpuorch-store-mark "
                          "1, epoch, job_id, reserved, wal)",
                          path, n);
    *ret = m;
    return 0;
}

int sq_mark_open(const char *path, int *ret_fd)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    *ret_fd = fd;
    return 0;
}

int sq_mark_create(const char *path, const struct sq_mark *m, int *ret_fd, char *err, size_t errlen)
{
    char buf[SQ_MARK_SIZE];
    size_t len = mark_format(m, buf);
    int rc = fsutil_write_atomic(path, buf, len, 0600, 0, err, errlen);
    if (rc == 0 && (rc = sq_mark_open(path, ret_fd)) != 0)
        errbuf_set(err, errlen, rc, "%s: %s", path, strerror(-rc));
    return rc;
}

int sq_mark_write(int fd, const struct sq_mark *m, bool sync)
{
    char buf[SQ_MARK_SIZE];
    size_t len = mark_format(m, buf);
    ssize_t n;
    do
        n = pwrite(fd, buf, len, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    if ((size_t)n != len)
        return GPO_EIO;
    if (sync && fdatasync(fd) != 0)
        return -errno;
    return 0;
}

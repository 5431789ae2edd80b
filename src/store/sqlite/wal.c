/*
 * wal.c - the check of a WAL file against SQLite's format (wal.h).
 *
 * Decisions the header leaves open:
 *  - The file is read frame by frame with pread into one buffer of a frame:
 *    a WAL of any length costs one frame of memory.
 *  - A frame with other salts ends the current generation: frames after it
 *    are not looked at (SQLite never reads past it either).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "store/sqlite/wal.h"
#include "util/errbuf.h"
#include "base/banned.h"

static uint32_t get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

void sq_wal_checksum(bool big_endian, const uint8_t *data, size_t len, uint32_t s[2])
{
    uint32_t s1 = s[0], s2 = s[1];
    for (size_t k = 0; k + 8 <= len; k += 8) {
        s1 += (big_endian ? get_be32(data + k) : get_le32(data + k)) + s2;
        s2 += (big_endian ? get_be32(data + k + 4) : get_le32(data + k + 4)) + s1;
    }
    s[0] = s1;
    s[1] = s2;
}

/* Reads exactly len bytes at off. 0 or a negative errno (GPO_EIO when short). */
static int read_at(int fd, void *buf, size_t len, off_t off)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, (char *)buf + got, len - got, off + (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return GPO_EIO;
        got += (size_t)n;
    }
    return 0;
}

/* The header's fields checked; its checksum into s. */
static int check_header(const char *path, const uint8_t *h, struct sq_wal_info *w, bool *big,
                        uint32_t s[2], char *err, size_t errlen)
{
    uint32_t magic = get_be32(h), format = get_be32(h + 4), psz = get_be32(h + 8);
    if (magic != SQ_WAL_MAGIC_LE && magic != SQ_WAL_MAGIC_BE)
        return errbuf_set(err, errlen, GPO_ECORRUPT,
                          "%s: the header (offset 0) has magic 0x%08" PRIx32
                          ", not a WAL's 0x377f0682 or 0x377f0683",
                          path, magic);
    if (format != SQ_WAL_FORMAT)
        return errbuf_set(err, errlen, GPO_ECORRUPT,
                          "%s: the header (offset 4) names format %" PRIu32 ", not 3007000", path,
                          format);
    if (psz < 512 || psz > 65536 || (psz & (psz - 1)))
        return errbuf_set(err, errlen, GPO_ECORRUPT,
                          "%s: the header (offset 8) names page size %" PRIu32
                          ", not a power of two from 512 to 65536",
                          path, psz);
    *big = magic == SQ_WAL_MAGIC_BE;
    s[0] = s[1] = 0;
    sq_wal_checksum(*big, h, 24, s);
    if (s[0] != get_be32(h + 24) || s[1] != get_be32(h + 28))
        return errbuf_set(err, errlen, GPO_ECORRUPT,
                          "%s: the header's checksum (offset 24) does not match its contents",
                          path);
    w->present = true;
    w->page_size = psz;
    w->salt1 = get_be32(h + 16);
    w->salt2 = get_be32(h + 20);
    return 0;
}

/* Why the current generation's frames end: what walk_frames found. */
enum wal_end { END_FILE, END_TORN, END_SALTS, END_CHECKSUM };

static const char *const end_words[] = {
    [END_FILE] = "the file ends there",
    [END_TORN] = "the file ends inside the next frame",
    [END_SALTS] = "the next frame belongs to an earlier generation (other salts)",
    [END_CHECKSUM] = "the next frame's checksum does not match",
};

/* Walks the frames while they carry the salts and check. */
static int walk_frames(int fd, off_t len, bool big, uint32_t s[2], struct sq_wal_info *w,
                       enum wal_end *ret_end)
{
    size_t fsz = SQ_WAL_FRAME_HEADER + (size_t)w->page_size;
    uint8_t *buf = malloc(fsz);
    if (!buf)
        return GPO_ENOMEM;
    w->frames = (uint32_t)((len - SQ_WAL_HEADER) / (off_t)fsz);
    w->torn = (len - SQ_WAL_HEADER) % (off_t)fsz != 0;
    enum wal_end end = w->torn ? END_TORN : END_FILE;
    int rc = 0;
    for (uint32_t k = 1; k <= w->frames; k++) {
        if ((rc = read_at(fd, buf, fsz, SQ_WAL_HEADER + (off_t)(k - 1) * (off_t)fsz)) != 0)
            break;
        if (get_be32(buf + 8) != w->salt1 || get_be32(buf + 12) != w->salt2) {
            end = END_SALTS;
            break;
        }
        uint32_t t[2] = {s[0], s[1]};
        sq_wal_checksum(big, buf, 8, t);
        sq_wal_checksum(big, buf + SQ_WAL_FRAME_HEADER, w->page_size, t);
        if (t[0] != get_be32(buf + 16) || t[1] != get_be32(buf + 20)) {
            end = END_CHECKSUM;
            break;
        }
        s[0] = t[0];
        s[1] = t[1];
        w->valid = k;
        if (get_be32(buf + 4) != 0)
            w->last_commit = k;
    }
    free(buf);
    *ret_end = end;
    return rc;
}

/* The verdict on a WAL whose frames were walked. */
static int judge(const char *path, const struct sq_wal_pos *acked, const struct sq_wal_info *w,
                 enum wal_end end, char *err, size_t errlen)
{
    size_t fsz = SQ_WAL_FRAME_HEADER + (size_t)w->page_size;
    long long next_off = SQ_WAL_HEADER + (long long)w->valid * (long long)fsz;
    bool known = acked && acked->frame > 0;
    if (known && (acked->salt1 != w->salt1 || acked->salt2 != w->salt2))
        return 0; /* restarted after the acknowledged commit: all of it is newer */
    if (known && w->last_commit < acked->frame)
        return errbuf_set(
            err, errlen, GPO_ECORRUPT,
            "%s: the last acknowledged commit is frame %" PRIu32 ", but only frames 1-%" PRIu32
            " check (the last commit among them: %" PRIu32 "): at offset %lld (frame %" PRIu32
            ") %s",
            path, acked->frame, w->valid, w->last_commit, next_off, w->valid + 1, end_words[end]);
    if (known)
        return 0; /* what follows was never acknowledged */
    if (end == END_CHECKSUM || end == END_TORN)
        return errbuf_set(err, errlen, GPO_ECORRUPT, "%s: at offset %lld (frame %" PRIu32 ") %s",
                          path, next_off, w->valid + 1, end_words[end]);
    if (w->valid > w->last_commit)
        return errbuf_set(err, errlen, GPO_ECORRUPT,
                          "%s: frames %" PRIu32 "-%" PRIu32 " (from offset %lld) follow the last "
                          "commit frame and do not end in one",
                          path, w->last_commit + 1, w->valid,
                          SQ_WAL_HEADER + (long long)w->last_commit * (long long)fsz);
    return 0;
}

int sq_wal_check(const char *wal_path, const struct sq_wal_pos *acked, struct sq_wal_info *ret,
                 char *err, size_t errlen)
{
    struct sq_wal_info w = {0};
    int fd = open(wal_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && acked && acked->frame > 0)
        return errbuf_set(err, errlen, GPO_ECORRUPT,
                          "%s: missing, but the last acknowledged commit is frame %" PRIu32
                          " of it (if another SQLite client checkpointed it into the database, "
                          "--recover keeps every row)",
                          wal_path, acked->frame);
    if (fd < 0 && errno == ENOENT) {
        *ret = w;
        return 0;
    }
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = -errno;
        if (fd >= 0)
            close(fd);
        return errbuf_set(err, errlen, e, "%s: %s", wal_path, strerror(-e));
    }
    uint8_t h[SQ_WAL_HEADER];
    uint32_t s[2] = {0, 0};
    bool big = false;
    enum wal_end end = END_FILE;
    int rc = 0;
    if (st.st_size > 0 && st.st_size < SQ_WAL_HEADER)
        rc =
            errbuf_set(err, errlen, GPO_ECORRUPT, "%s: %lld bytes, shorter than the 32-byte header",
                       wal_path, (long long)st.st_size);
    else if (st.st_size >= SQ_WAL_HEADER && (rc = read_at(fd, h, sizeof(h), 0)) != 0)
        rc = errbuf_set(err, errlen, rc, "%s: reading the header: %s", wal_path, gpo_strerror(rc));
    else if (st.st_size >= SQ_WAL_HEADER &&
             (rc = check_header(wal_path, h, &w, &big, s, err, errlen)) == 0 &&
             (rc = walk_frames(fd, st.st_size, big, s, &w, &end)) != 0)
        rc = errbuf_set(err, errlen, rc, "%s: reading the frames: %s", wal_path, gpo_strerror(rc));
    close(fd);
    if (rc == 0 && w.present)
        rc = judge(wal_path, acked, &w, end, err, errlen);
    if (rc == 0 && !w.present && acked && acked->frame > 0)
        rc = errbuf_set(err, errlen, GPO_ECORRUPT,
                        "%s: %s, but the last acknowledged commit is frame %" PRIu32
                        " of it (if another SQLite client checkpointed it into the database, "
                        "--recover keeps every row)",
                        wal_path, st.st_size ? "no header" : "empty", acked->frame);
    /* A mark that records no acknowledged commit in the WAL (a clean close,
     * or nothing committed since the start) makes all of it unacknowledged:
     * a crash in the first transaction leaves what SQLite drops, no damage. */
    if (rc == GPO_ECORRUPT && acked && acked->frame == 0) {
        rc = 0;
        w = (struct sq_wal_info){0};
        if (errlen)
            err[0] = '\0';
    }
    if (rc == 0)
        *ret = w;
    return rc;
}

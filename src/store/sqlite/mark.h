/*
 * mark.h - the SQLite store's mark file (DB.mark beside the database): what
 * the store knows about its database from outside it, so that damage to the
 * database or its WAL cannot pass for a smaller or a new store. Written at
 * the store's first start and by the writer after each group commit. Private
 * to src/store/sqlite and its tests.
 *
 * It holds the highest leader epoch issued and the highest job id committed
 * (a damaged database that reads lower lost committed data), a reservation
 * of job ids (ids up to it may have been given out: a recovered store
 * restarts its ids above it), and the WAL position of the last commit the
 * store acknowledged (wal.h checks the WAL against it).
 *
 * Durability: the job id and the WAL position are rewritten (one pwrite of
 * the whole small file, no fsync) after every group commit, before its
 * completions run: exact after a crash of the process, possibly older after
 * a power loss, which only makes the checks weaker, never wrong, since the
 * database's own writes are synced first. The epoch, the reservation (in
 * blocks of SQ_MARK_RESERVE ids) and a clean close are fsynced before
 * anything depends on them.
 *
 * The file is a few lines of text, padded to SQ_MARK_SIZE bytes:
 *   gpuorch-store-mark 1
 *   epoch E
 *   job_id J
 *   reserved R
 *   wal SALT1 SALT2 FRAME   (FRAME 0: no acknowledged commit in a WAL)
 */
#ifndef GPUORCH_STORE_SQLITE_MARK_H
#define GPUORCH_STORE_SQLITE_MARK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/sqlite/wal.h"

#define SQ_MARK_SIZE    256
#define SQ_MARK_RESERVE 1024 /* job ids reserved at a time */

struct sq_mark {
    int64_t epoch;
    int64_t job_id;
    int64_t reserved;
    struct sq_wal_pos wal;
};

/* Reads the mark at path into *ret. 0; GPO_ENOENT when there is none;
 * GPO_ECORRUPT when it is not one (err names the file and the line); a
 * negative errno. */
int sq_mark_read(const char *path, struct sq_mark *ret, char *err, size_t errlen);

/* Writes a new mark file at path atomically (temporary file, fsync,
 * rename, fsync of the directory), then opens it for sq_mark_write:
 * *ret_fd, the caller closes it. 0 or the error (err says why). */
int sq_mark_create(const char *path, const struct sq_mark *m, int *ret_fd, char *err,
                   size_t errlen);

/* Opens an existing mark for sq_mark_write. 0 and *ret_fd, or -errno. */
int sq_mark_open(const char *path, int *ret_fd);

/* Rewrites the mark in place (one pwrite of SQ_MARK_SIZE bytes), then
 * fdatasync when `sync`. 0 or a negative errno. */
int sq_mark_write(int fd, const struct sq_mark *m, bool sync);

#endif

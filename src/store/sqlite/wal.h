/*
 * wal.h - the SQLite backend's check of a write-ahead log against SQLite's
 * documented file format (https://www.sqlite.org/fileformat2.html, section
 * 4 "The Write-Ahead Log"), made before SQLite opens the database: SQLite's
 * own recovery stops without a word at the first frame whose checksum
 * fails, so damage near the end of the WAL would otherwise drop committed
 * transactions in silence. Private to src/store/sqlite and its tests.
 *
 * The format: a 32-byte header (magic 0x377f0682 or 0x377f0683, format
 * 3007000, page size, checkpoint sequence, two salts, a checksum of the
 * first 24 bytes), then frames of a 24-byte header (page number, database
 * size after commit, non-zero on a commit frame, the two salts, a checksum)
 * and one page. Checksums are cumulative from the header's and read the
 * file's 32-bit words little-endian under magic 0x377f0682, big-endian under
 * 0x377f0683. Frames of the current generation carry the header's salts;
 * frames of an earlier one (the file is reused from its start after a
 * checkpoint) carry others and are ignored, as SQLite ignores them.
 */
#ifndef GPUORCH_STORE_SQLITE_WAL_H
#define GPUORCH_STORE_SQLITE_WAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SQ_WAL_HEADER       32
#define SQ_WAL_FRAME_HEADER 24
#define SQ_WAL_MAGIC_LE     0x377f0682u
#define SQ_WAL_MAGIC_BE     0x377f0683u
#define SQ_WAL_FORMAT       3007000u

/* A commit in a WAL: the salts of its generation and its frame (from 1). */
struct sq_wal_pos {
    uint32_t salt1, salt2;
    uint32_t frame; /* 0: none known */
};

/* What sq_wal_check read. */
struct sq_wal_info {
    bool present;       /* a file with a header (absent or empty: false) */
    uint32_t page_size; /* of the header */
    uint32_t salt1, salt2;
    uint32_t frames;      /* whole frames in the file */
    uint32_t valid;       /* frames 1..valid carry the salts and check */
    uint32_t last_commit; /* the last commit frame among them; 0: none */
    bool torn;            /* the file ends inside a frame */
};

/*
 * Checks the WAL at wal_path. `acked` (may be NULL) is the last commit the
 * store acknowledged, as its mark file recorded it: with the header's salts,
 * frames 1..acked->frame must check and end in a commit, and what follows
 * is a transaction that was never acknowledged (a crash in its write),
 * which SQLite drops; with other salts the WAL was restarted after it. With
 * no acknowledged commit known, anything past the last commit frame but an
 * earlier generation's frames is damage: a torn frame, a current frame whose
 * checksum fails, checked frames that do not end in a commit.
 *
 * 0 and *ret (no file, or an empty one, is fine: present false);
 * GPO_ECORRUPT with err naming the file and what was found at which offset
 * and frame; a negative errno when the file cannot be read (err says so).
 */
int sq_wal_check(const char *wal_path, const struct sq_wal_pos *acked, struct sq_wal_info *ret,
                 char *err, size_t errlen);

/* The cumulative checksum of data[0..len) (len a multiple of 8) from s[2],
 * in the byte order of `big_endian`; for the tests that craft WAL files. */
void sq_wal_checksum(bool big_endian, const uint8_t *data, size_t len, uint32_t s[2]);

#endif

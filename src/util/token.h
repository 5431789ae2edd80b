/*
 * token.h - API bearer tokens.
 *
 * A token is "gpo_" followed by 43 base64url characters (no padding): 256
 * random bits from libsodium. The controller keeps only its SHA-256 and
 * compares hashes in constant time, so a stolen database holds no usable
 * token and a timing side channel gives nothing away. The prefix makes a
 * token recognisable to secret scanners and in a mistyped header.
 *
 * Errors: each function returns 0 or one of the negative TOKEN_* codes below
 * (this module's own table); out-parameters and caller buffers are written
 * only on success. File functions leave errno as the failing system call set
 * it, so a caller can say why (GPO_EIO, GPO_EEXIST).
 */
#ifndef GPUORCH_UTIL_TOKEN_H
#define GPUORCH_UTIL_TOKEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/err.h"

#define TOKEN_PREFIX     "gpo_"
#define TOKEN_PREFIX_LEN 4
#define TOKEN_RANDOM_LEN 32 /* bytes of randomness */
/* Characters of a token, without the NUL: the prefix and 43 base64url ones. */
#define TOKEN_STR_LEN 47
/* Bytes of a token's SHA-256, and of its lower-case hex form without the NUL. */
#define TOKEN_HASH_LEN     32
#define TOKEN_HASH_HEX_LEN 64

/*
 * Initialises libsodium. Call it once before the other functions (the
 * daemons do it at start); calling it again, from any thread, is harmless.
 * Returns 0 or GPO_ECRYPTO.
 */
int token_lib_init(void);

/*
 * Writes a new random token into buf (len >= TOKEN_STR_LEN + 1 bytes,
 * NUL-terminated). Returns 0; GPO_ENOBUFS when len is too small;
 * GPO_EINVAL for a NULL buf; GPO_ECRYPTO when libsodium cannot start.
 */
int token_generate(char *buf, size_t len);

/*
 * Checks that `token` has a token's shape: the prefix, exactly 43 characters
 * of [A-Za-z0-9_-], and a last character that encodes no stray bits (as a
 * canonical encoding of 32 bytes must). Lets a server refuse a malformed
 * header without a store lookup. Returns 0 or GPO_ESYNTAX (GPO_EINVAL for
 * NULL). `token` is borrowed.
 */
int token_check_format(const char *token);

/*
 * Writes the SHA-256 of the bytes of `token` (any string: the shape is not
 * checked) into out. Returns 0, or GPO_EINVAL for a NULL argument.
 */
int token_hash(const char *token, uint8_t out[TOKEN_HASH_LEN]);

/* Writes `hash` as lower-case hex into buf (len >= TOKEN_HASH_HEX_LEN + 1).
 * Returns 0, GPO_ENOBUFS or GPO_EINVAL. */
int token_hash_hex(const uint8_t hash[TOKEN_HASH_LEN], char *buf, size_t len);

/*
 * Reads a join token's file, leniently (any word: the controller checks it):
 * one word on one line, a trailing newline allowed, into buf (len bytes, NUL-terminated). Messages
 * begin with
 * "--join-token PATH:" (the flag daemons read it from). 0; -errno (it cannot
 * be opened), GPO_EIO, GPO_ESYNTAX (empty, or more than one word), with the
 * message in err.
 */
int token_read_join(const char *path, char *buf, size_t len, char *err, size_t errlen);

/* Whether two hashes are equal, in time that does not depend on where they
 * differ (sodium_memcmp). Both are TOKEN_HASH_LEN bytes. */
bool token_hash_equal(const uint8_t *a, const uint8_t *b);

/*
 * Writes `token` and a newline to a new file at `path`, mode 0600 whatever
 * the umask. The token is written and fsynced to a temporary file in the same
 * directory, then hard-linked to `path` (link never replaces an existing
 * name) and the directory fsynced: `path` either does not exist or holds the
 * whole token, even across a crash. Returns 0; GPO_ESYNTAX when `token` is
 * malformed; GPO_EEXIST when `path` exists (it is left alone); GPO_EIO
 * for any other failure (no file is left behind); GPO_EINVAL for NULL or
 * an over-long path. Both strings are borrowed.
 */
int token_write_file(const char *path, const char *token);

/*
 * Reads a token written by token_write_file (the token, with or without a
 * final newline, nothing else) into buf (len >= TOKEN_STR_LEN + 1). Refuses,
 * as ssh does with private keys, a file that group or others may read, write
 * or execute: GPO_EMODE, so that a leaked token is noticed rather than
 * used. Returns 0; GPO_EMODE; GPO_ESYNTAX when the content is not one
 * well-formed token; GPO_EIO when the file cannot be opened or read, or is
 * not a regular file; GPO_ENOBUFS; GPO_EINVAL for NULL.
 */
int token_read_file(const char *path, char *buf, size_t len);

#endif

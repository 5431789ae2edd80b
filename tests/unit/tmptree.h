/*
 * tmptree.h - what the controller and agent unit tests share about their
 * temporary directories, and the files their processes write there.
 */
#ifndef GPUORCH_TESTS_TMPTREE_H
#define GPUORCH_TESTS_TMPTREE_H

#include <stddef.h>

/* A store test's temporary directory: dir is /tmp/PREFIX.XXXXXX, path the
 * database in it (dir/gpuorch.db), wal its write-ahead log (path-wal). */
struct tmpdb {
    char dir[64];
    char path[128];
    char wal[160];
};

/* cmocka setup: *state becomes a new struct tmpdb, its directory made; -1 on
 * failure. tmpdb_teardown removes the directory and frees it. */
int tmpdb_setup(void **state, const char *prefix);
int tmpdb_teardown(void **state);

/* Removes dir and everything below it (symbolic links are removed, never
 * followed); errors are ignored: a test's cleanup must not fail the test. */
void tmptree_remove(const char *dir);

/* A short pause (5 ms) for loops that poll with a deadline. */
void tmptree_pause(void);

/* Waits (polling, 60 s at most) until path exists; a cmocka failure if not. */
void tmptree_wait_file(const char *path);

/* The number on the first line of path; the file must exist (cmocka). */
long tmptree_read_number(const char *path);

/* The start of path's text into buf (len bytes, NUL-terminated). */
void tmptree_read_text(const char *path, char *buf, size_t len);

#endif

/*
 * tmptree.h - what the controller and agent unit tests share about their
 * temporary directories.
 */
#ifndef GPUORCH_TESTS_TMPTREE_H
#define GPUORCH_TESTS_TMPTREE_H

/* Removes dir and everything below it (symbolic links are removed, never
 * followed); errors are ignored: a test's cleanup must not fail the test. */
void tmptree_remove(const char *dir);

#endif

/*
 * sim_testdir.h - what the simulator's reader tests share: $SIM_TEST_DATA
 * (the fixtures in tests/sim/) and a scratch directory under /tmp for the
 * files a test writes, made by the group setup and emptied and removed by
 * its teardown. Header-only: each test is its own program.
 */
#ifndef GPUORCH_TESTS_SIM_TESTDIR_H
#define GPUORCH_TESTS_SIM_TESTDIR_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct sim_testdir {
    char dir[64];   /* scratch directory for files written by the tests */
    char data[512]; /* $SIM_TEST_DATA */
};

/* A group setup: *state becomes a struct sim_testdir with a fresh
 * directory /tmp/NAME.XXXXXX. 0, or -1 (no $SIM_TEST_DATA, no directory). */
static inline int sim_testdir_setup(void **state, const char *name)
{
    struct sim_testdir *e = calloc(1, sizeof(*e));
    const char *data = getenv("SIM_TEST_DATA");
    if (!e || !data) {
        free(e);
        return -1;
    }
    snprintf(e->data, sizeof(e->data), "%s", data);
    snprintf(e->dir, sizeof(e->dir), "/tmp/%.40s.XXXXXX", name);
    if (!mkdtemp(e->dir)) {
        free(e);
        return -1;
    }
    *state = e;
    return 0;
}

/* A group teardown: the directory's files and itself removed. */
static inline int sim_testdir_teardown(void **state)
{
    struct sim_testdir *e = *state;
    DIR *d = opendir(e->dir);
    for (struct dirent *de; d && (de = readdir(d));) {
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", e->dir, de->d_name);
        if (de->d_name[0] != '.')
            unlink(path);
    }
    if (d)
        closedir(d);
    rmdir(e->dir);
    free(e);
    return 0;
}

#endif

/*
 * tmptree.c - removing a test's temporary directory (tmptree.h).
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include "tmptree.h"

#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/banned.h"

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

void tmptree_remove(const char *dir)
{
    nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

void tmptree_pause(void)
{
    struct timespec ts = {.tv_nsec = 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

void tmptree_wait_file(const char *path)
{
    time_t end = time(NULL) + 60;
    while (access(path, F_OK) != 0 && time(NULL) < end)
        tmptree_pause();
    assert_int_equal(access(path, F_OK), 0);
}

long tmptree_read_number(const char *path)
{
    char buf[64] = "";
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof(buf), f));
    fclose(f);
    return strtol(buf, NULL, 10);
}

void tmptree_read_text(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
}

int tmpdb_setup(void **state, const char *prefix)
{
    struct tmpdb *e = calloc(1, sizeof(*e));
    if (!e)
        return -1;
    snprintf(e->dir, sizeof(e->dir), "/tmp/%s.XXXXXX", prefix);
    if (!mkdtemp(e->dir)) {
        free(e);
        return -1;
    }
    snprintf(e->path, sizeof(e->path), "%s/gpuorch.db", e->dir);
    snprintf(e->wal, sizeof(e->wal), "%s-wal", e->path);
    *state = e;
    return 0;
}

int tmpdb_teardown(void **state)
{
    struct tmpdb *e = *state;
    tmptree_remove(e->dir);
    free(e);
    return 0;
}

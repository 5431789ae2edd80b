/*
 * tmptree.c - removing a test's temporary directory (tmptree.h).
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include "tmptree.h"

#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>

#include "util/banned.h"

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

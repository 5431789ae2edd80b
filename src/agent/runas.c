/*
 * runas.c - the network half's account and the drop to it (runas.h).
 */
#define _GNU_SOURCE
#include "agent/runas.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/errbuf.h"
#include "base/banned.h"

int runas_lookup(const char *name, struct runas_account *ret, char *err, size_t errlen)
{
    if (!name || !name[0] || strlen(name) >= PRIV_USER_MAX)
        return errbuf_set(err, errlen, GPO_EINVAL, "--run-as: expected a user name of 1..%d bytes",
                          PRIV_USER_MAX - 1);
    struct passwd pw, *res = NULL;
    char buf[16384];
    int e = getpwnam_r(name, &pw, buf, sizeof(buf), &res);
    if (!res && (e == 0 || e == ENOENT))
        return errbuf_set(err, errlen, GPO_ENOENT,
                          "--run-as %s: no such account; create it (scripts/setup.sh makes '%s': "
                          "useradd --system --no-create-home --shell /usr/sbin/nologin %s) or "
                          "name another with --run-as USER",
                          name, RUNAS_DEFAULT_USER, RUNAS_DEFAULT_USER);
    if (!res)
        return errbuf_set(err, errlen, GPO_EIO, "--run-as %s: %s", name, strerror(e));
    if (pw.pw_uid == 0)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "--run-as %s: uid 0; the agent's network half never runs as root", name);
    snprintf(ret->name, sizeof(ret->name), "%s", pw.pw_name);
    ret->uid = pw.pw_uid;
    ret->gid = pw.pw_gid;
    return 0;
}

int runas_give(const struct runas_account *a, const char *path, bool missing_ok, char *err,
               size_t errlen)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && missing_ok)
        return 0;
    if (fd < 0 && errno == ELOOP)
        return errbuf_set(err, errlen, GPO_EINVAL, "%s: a symbolic link, not followed", path);
    if (fd < 0)
        return errbuf_set(err, errlen, -errno, "%s: %s", path, strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0)
        rc = errbuf_set(err, errlen, -errno, "%s: %s", path, strerror(errno));
    else if (!S_ISDIR(st.st_mode) && !(S_ISREG(st.st_mode) && st.st_nlink == 1))
        rc = errbuf_set(err, errlen, GPO_EINVAL, "%s: not a directory or a file with one link",
                        path);
    else if ((st.st_uid != a->uid || st.st_gid != a->gid) && fchown(fd, a->uid, a->gid) != 0)
        rc = errbuf_set(err, errlen, -errno, "chown %s to %s: %s", path, a->name, strerror(errno));
    close(fd);
    return rc;
}

int runas_can_reach(const struct runas_account *a, const char *path, char *err, size_t errlen)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", path);
    for (char *slash = strrchr(dir, '/'); slash; slash = strrchr(dir, '/')) {
        *slash = '\0';
        const char *d = dir[0] ? dir : "/";
        struct stat st;
        if (stat(d, &st) != 0)
            return errbuf_set(err, errlen, -errno, "%s: %s", d, strerror(errno));
        bool x = (st.st_mode & S_IXOTH) || (st.st_uid == a->uid && (st.st_mode & S_IXUSR)) ||
                 (st.st_gid == a->gid && (st.st_mode & S_IXGRP));
        if (!x)
            return errbuf_set(err, errlen, GPO_EACCES,
                              "%s: the account %s cannot reach %s (give the directory o+x, or "
                              "choose another --state-dir)",
                              d, a->name, path);
        if (!dir[0])
            break;
    }
    return 0;
}

/* Whether any capability is left in the permitted or effective set. */
static bool has_capabilities(void)
{
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];
    memset(d, 0, sizeof(d));
    if (syscall(SYS_capget, &h, d) != 0)
        return true; /* cannot tell: count it as kept */
    for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; i++) {
        if (d[i].permitted || d[i].effective)
            return true;
    }
    return false;
}

int runas_drop(const struct runas_account *a, char *err, size_t errlen)
{
    if (initgroups(a->name, a->gid) != 0)
        return errbuf_set(err, errlen, GPO_EPERM, "initgroups %s: %s", a->name, strerror(errno));
    if (setresgid(a->gid, a->gid, a->gid) != 0)
        return errbuf_set(err, errlen, GPO_EPERM, "setresgid %ld: %s", (long)a->gid,
                          strerror(errno));
    if (setresuid(a->uid, a->uid, a->uid) != 0)
        return errbuf_set(err, errlen, GPO_EPERM, "setresuid %ld: %s", (long)a->uid,
                          strerror(errno));
    uid_t r, e, s;
    gid_t rg, eg, sg;
    if (getresuid(&r, &e, &s) != 0 || r != a->uid || e != a->uid || s != a->uid ||
        getresgid(&rg, &eg, &sg) != 0 || rg != a->gid || eg != a->gid || sg != a->gid)
        return errbuf_set(err, errlen, GPO_EPERM, "after the drop to %s: uids or gids not all %ld",
                          a->name, (long)a->uid);
    /* No way back: a process that can become root again has dropped nothing. */
    if (setuid(0) == 0 || seteuid(0) == 0)
        return errbuf_set(err, errlen, GPO_EPERM, "after the drop to %s: setuid(0) still works",
                          a->name);
    if (has_capabilities())
        return errbuf_set(err, errlen, GPO_EPERM, "after the drop to %s: capabilities remain",
                          a->name);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return errbuf_set(err, errlen, GPO_EPERM, "prctl(PR_SET_NO_NEW_PRIVS): %s",
                          strerror(errno));
    return 0;
}

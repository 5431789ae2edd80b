/*
 * runas.h - the account the agent's network half runs as, and the drop to
 * it: once the privileged half is forked and what needs root at start is
 * done (the join token read, the state directory made and given to the
 * account, NVML initialized), the network half becomes that account for
 * good. It keeps no capability and cannot gain one (PR_SET_NO_NEW_PRIVS);
 * every later need of root is a request to the privileged half (priv.h).
 *
 * Errors: 0 or a GPO_* code with one line in err; nothing here logs.
 */
#ifndef GPUORCH_AGENT_RUNAS_H
#define GPUORCH_AGENT_RUNAS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "agent/priv.h"

/* The account's name by default (scripts/setup.sh creates it). */
#define RUNAS_DEFAULT_USER "gpuorch"

struct runas_account {
    char name[PRIV_USER_MAX];
    uid_t uid;
    gid_t gid; /* its primary group */
};

/*
 * Looks name (borrowed) up in the password database into *ret. Refuses
 * uid 0 (the point is not to be root). 0; GPO_ENOENT (no such account:
 * the message says how to make one or name another); GPO_EINVAL (uid 0,
 * or a name too long); GPO_EIO.
 */
int runas_lookup(const char *name, struct runas_account *ret, char *err, size_t errlen);

/*
 * Gives path (a directory or file, borrowed) to the account: opened with
 * O_NOFOLLOW (a symbolic link is refused, so that nothing planted in a
 * directory the account could write is followed as root), and, for a
 * file, only with one link. Missing is not an error when missing_ok.
 * 0, GPO_ENOENT, GPO_EINVAL (a link, several links, not a file or
 * directory), -errno.
 */
int runas_give(const struct runas_account *a, const char *path, bool missing_ok, char *err,
               size_t errlen);

/*
 * Whether the account can reach path (absolute, borrowed): every directory
 * above it searchable by it (others' x bit, or the owner's or group's when
 * the account is the owner or in the group by its primary gid). Checked
 * while root, so that a state directory under a private home says so
 * before the drop rather than failing after it. 0 or GPO_EACCES naming
 * the directory.
 */
int runas_can_reach(const struct runas_account *a, const char *path, char *err, size_t errlen);

/*
 * Becomes the account for good, in a process that is root: supplementary
 * groups (initgroups: the account's own, e.g. video for /dev/nvidia*),
 * then gid, then uid (setresgid, setresuid), each checked; then
 * getresuid/getresgid must show the account in all three, setuid(0) must
 * fail, no capability may be left in the permitted or effective set, and
 * PR_SET_NO_NEW_PRIVS is set. Call it before any thread starts: the
 * capability and no_new_privs state is per thread. 0 or GPO_EPERM with
 * which step failed (the caller should exit).
 */
int runas_drop(const struct runas_account *a, char *err, size_t errlen);

#endif

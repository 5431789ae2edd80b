/*
 * cgroup.h - cgroup v2 for the node agent: one cgroup per attempt, under a
 * root the agent owns, with CPU and memory limits, and kills that reach every
 * process of the attempt (a child that called setsid included).
 *
 * The root is found once (cgroup_root_open); each attempt then gets
 * ROOT/job-J.A (cgroup_create), its processes are moved in (cgroup_attach,
 * done by the shim's child for itself), stopped (cgroup_signal, cgroup_kill)
 * and the empty cgroup removed (cgroup_remove). Where cgroup v2 is missing or
 * not writable, cgroup_root_open says why and the agent falls back to process
 * groups.
 *
 * Paths given to the per-cgroup calls are borrowed and used as they are: the
 * caller (the privileged half) builds them from the root and (job, attempt),
 * never from a request's text.
 *
 * Errors: functions return 0 or one of the negative CGROUP_* codes below and,
 * where they take one, write a one-line message naming the path and the
 * failed call into the caller's `err` buffer (errlen bytes; may be NULL/0).
 * Out-parameters are set only on success. Out of memory: GPO_ENOMEM.
 * Nothing here logs or exits. Calls on different cgroups may run in parallel;
 * a struct cgroup_root is read-only once open.
 */
#ifndef GPUORCH_AGENT_CGROUP_H
#define GPUORCH_AGENT_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "base/err.h"

/* Longest cgroup path, NUL included; longer roots are refused. */
#define CGROUP_PATH_MAX 1024

struct cgroup_root;

/*
 * Finds the cgroup v2 mount point in /proc/self/mountinfo and writes it into
 * ret_path (len bytes). Returns 0, GPO_ENOTSUP (no cgroup2 mount; the
 * message says so), GPO_EINVAL (the mount point does not fit) or
 * GPO_EIO (mountinfo unreadable).
 */
int cgroup_mount_find(char *ret_path, size_t len, char *err, size_t errlen);

/*
 * Opens the root under which attempts get their cgroups. `path` (borrowed)
 * NULL or "auto": the cgroup2 mount + "/gpuorch", created (0755) when
 * missing; else an existing absolute directory on a cgroup2 filesystem.
 * Checks that the root is usable: it creates a probe child, moves a
 * short-lived forked process into it (so a root where cgroups can be made
 * but processes not moved is refused too) and removes it. Then enables
 * "+cpu" and "+memory" in ROOT/cgroup.subtree_control where ROOT's
 * cgroup.controllers offers them (the parent is not changed; what it does
 * not offer, or what cannot be enabled, is left out) and records what the
 * root's children get (cgroup_root_has).
 *
 * Returns 0 and *ret (caller frees with cgroup_root_close), GPO_ENOTSUP
 * (no cgroup v2 there, or not writable: the message names the path and the
 * reason, one line for the agent's log before it falls back to process
 * groups), GPO_EINVAL (path relative or too long), GPO_ENOMEM.
 */
int cgroup_root_open(const char *path, struct cgroup_root **ret, char *err, size_t errlen);

/* Frees the handle (the directory stays). NULL is fine. */
void cgroup_root_close(struct cgroup_root *root);

/* The root's directory, owned by `root`. */
const char *cgroup_root_path(const struct cgroup_root *root);

/* True when the root's children get `controller` ("cpu", "memory"), so that
 * cgroup_create writes its limit. */
bool cgroup_root_has(const struct cgroup_root *root, const char *controller);

/* The largest memory limit cgroup_create takes, in MiB (1 PiB). */
#define CGROUP_MEM_MIB_MAX ((int64_t)1 << 30)

/*
 * Creates ROOT/job-J.A for attempt A of job J (an existing one, left by an
 * earlier launch of the same attempt, is reused) and writes its path into
 * path_out (len bytes). Writes memory.max (mem_mib MiB, or "max" for 0) when
 * the root has the memory controller, and cpu.max ("QUOTA 100000", QUOTA =
 * cpu_milli * 100 microseconds per 100 ms period, at least the kernel's
 * 1000; "max" for 0) when it has cpu; a limit the root cannot enforce is
 * skipped (cgroup_root_has says which). Returns 0, GPO_EINVAL (job 0,
 * attempt 0, mem_mib < 0 or over CGROUP_MEM_MIB_MAX, path_out too short),
 * GPO_EIO (a cgroup made here is removed again). On failure path_out is
 * untouched.
 */
int cgroup_create(const struct cgroup_root *root, uint64_t job, uint32_t attempt,
                  uint32_t cpu_milli, int64_t mem_mib, char *path_out, size_t len, char *err,
                  size_t errlen);

/* Moves process `pid` (0: the caller) and its threads into cgroup `path`;
 * its children, forked later, are born there. Returns 0, GPO_ENOENT (no
 * such cgroup), GPO_EIO (e.g. not permitted: the message says). */
int cgroup_attach(const char *path, pid_t pid, char *err, size_t errlen);

/*
 * Kills every process in cgroup `path`: writes "1" to cgroup.kill, which the
 * kernel applies to the whole subtree at once, so nothing forks its way out.
 * Where the kernel lacks cgroup.kill (before Linux 5.14), it freezes the
 * cgroup where it can, sends SIGKILL to each pid in cgroup.procs, and
 * repeats until the list is empty or a bounded number of rounds passed.
 * Returns once the signals are sent (processes may still be exiting:
 * cgroup_populated tells when they are gone). 0 also for an empty cgroup;
 * GPO_ENOENT (no such cgroup), GPO_EIO.
 */
int cgroup_kill(const char *path, char *err, size_t errlen);

/* Sends `sig` to each process listed in path/cgroup.procs. Returns 0 (also
 * when there is none, or one exited meanwhile), GPO_ENOENT, GPO_EIO,
 * GPO_ENOMEM, GPO_EINVAL (sig not 1..64). */
int cgroup_signal(const char *path, int sig, char *err, size_t errlen);

/* Whether any process is left in the cgroup or below it ("populated" in
 * cgroup.events). Returns 0 and *ret_populated, GPO_ENOENT, GPO_EIO. */
int cgroup_populated(const char *path, bool *ret_populated, char *err, size_t errlen);

/* Removes the (empty) cgroup. Returns 0 (also when it was gone already),
 * GPO_EBUSY while processes remain in it, GPO_EIO. */
int cgroup_remove(const char *path, char *err, size_t errlen);

/* The processes in the cgroup itself (cgroup.procs). Returns 0 with
 * *ret_pids (caller frees with free(); NULL when *ret_n is 0) and *ret_n,
 * GPO_ENOENT, GPO_EIO, GPO_ENOMEM. */
int cgroup_pids(const char *path, pid_t **ret_pids, size_t *ret_n, char *err, size_t errlen);

#endif

/*
 * cgroup.h - cgroups for the node agent: one cgroup per attempt, under a
 * root the agent owns, with CPU weight, CPU and memory limits, an
 * out-of-memory count, and kills that reach every process of the attempt (a
 * child that called setsid included).
 *
 * The root is found once (cgroup_root_open); each attempt then gets
 * ROOT/job-J.A (cgroup_create), its processes are moved in (cgroup_attach,
 * done by the shim's child for itself), stopped (cgroup_signal, cgroup_kill)
 * and the empty cgroup removed (cgroup_remove). Where there is no writable
 * cgroup filesystem, cgroup_root_open says why and the agent falls back to
 * process groups.
 *
 * Both cgroup versions: the root is a directory on the cgroup2 mount, or on
 * a v1 hierarchy. Each limit is enforced where the kernel has its
 * controller: on cgroup v2 when the root's cgroup.controllers offers it
 * (memory.max, cpu.weight, cpu.max), else in the controller's v1 hierarchy
 * (memory.limit_in_bytes, cpu.shares, cpu.cfs_quota_us), at the root's path
 * below its own mount point there (ROOT = /sys/fs/cgroup/unified/gpuorch/n1
 * puts memory limits in /sys/fs/cgroup/memory/gpuorch/n1/job-J.A), as on a
 * hybrid machine where cpu and memory are bound to v1 and the cgroup2 mount
 * has neither. An attempt's cgroup is still named by its one ROOT/job-J.A
 * path: the per-cgroup calls below find its v1 directories from the mount
 * table, move processes into all of them and remove all of them.
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
 * NULL or "auto": the cgroup2 mount + "/gpuorch" (without a cgroup2 mount:
 * the v1 freezer's, else memory's, else cpu's hierarchy + "/gpuorch"),
 * created (0755) when missing; else an existing absolute directory on a
 * cgroup filesystem (cgroup2 or a v1 hierarchy). Checks that the root is
 * usable: it creates a probe child, moves a short-lived forked process into
 * it (so a root where cgroups can be made but processes not moved is refused
 * too) and removes it. On cgroup2 it then enables "+cpu" and "+memory" in
 * ROOT/cgroup.subtree_control where ROOT's cgroup.controllers offers them
 * (the parent is not changed). Each of cpu and memory that v2 does not give
 * is taken from its v1 hierarchy where one is mounted: the root's directory
 * there is made, with its parents, when missing (so is the v1 freezer's, for
 * kills, when the root itself is on v1). What can be had neither way is left
 * out; cgroup_root_kind says what the root's children get.
 *
 * Returns 0 and *ret (caller frees with cgroup_root_close), GPO_ENOTSUP
 * (no cgroup filesystem there, or not writable: the message names the path
 * and the reason, one line for the agent's log before it falls back to
 * process groups), GPO_EINVAL (path relative or too long), GPO_ENOMEM.
 */
int cgroup_root_open(const char *path, struct cgroup_root **ret, char *err, size_t errlen);

/* Frees the handle (the directory stays). NULL is fine. */
void cgroup_root_close(struct cgroup_root *root);

/* The root's directory, owned by `root`. */
const char *cgroup_root_path(const struct cgroup_root *root);

/* Where a controller's limits are enforced. */
enum cgroup_kind {
    CGROUP_NONE, /* not at all */
    CGROUP_V1,   /* in the controller's v1 hierarchy */
    CGROUP_V2,   /* on cgroup v2 */
};

/* "no", "cgroup v1", "cgroup v2"; "unknown" out of range. */
const char *cgroup_kind_name(enum cgroup_kind kind);

/* How the root's children get `controller` ("cpu", "memory"; any other
 * name: CGROUP_NONE), so that cgroup_create writes its limits. */
enum cgroup_kind cgroup_root_kind(const struct cgroup_root *root, const char *controller);

/* cgroup_root_kind(root, controller) != CGROUP_NONE. */
bool cgroup_root_has(const struct cgroup_root *root, const char *controller);

/* The directory whose job-J.A children hold `controller`'s files (the root
 * itself on v2, its directory in the v1 hierarchy on v1), owned by `root`;
 * NULL where the root does not have the controller. */
const char *cgroup_root_dir(const struct cgroup_root *root, const char *controller);

/* What cgroup_root_open("auto") would use, found without making or
 * changing anything (for `gpuorch agent --probe`). */
struct cgroup_limit {
    enum cgroup_kind kind;
    char dir[CGROUP_PATH_MAX]; /* where attempts' cgroups would get its files; "" for none */
};
struct cgroup_layout {
    char root[CGROUP_PATH_MAX]; /* the automatic root */
    enum cgroup_kind root_kind; /* CGROUP_V2: on the cgroup2 mount; CGROUP_V1: on a v1 one */
    struct cgroup_limit cpu, memory;
};

/* Fills *ret. Returns 0, GPO_ENOTSUP (no cgroup filesystem at all; the
 * message says so), GPO_EIO, GPO_ENOMEM. */
int cgroup_layout_read(struct cgroup_layout *ret, char *err, size_t errlen);

/* The largest memory limit cgroup_create takes, in MiB (1 PiB). */
#define CGROUP_MEM_MIB_MAX ((int64_t)1 << 30)

/*
 * Creates ROOT/job-J.A for attempt A of job J (an existing one, left by an
 * earlier launch of the same attempt, is reused), and its directories in the
 * v1 hierarchies the root uses (with the root's own there, should it have
 * gone), and writes its path into path_out (len bytes). With the memory
 * controller: a limit of mem_mib MiB (0: none) that swap does not stretch;
 * on v2 memory.max (and memory.swap.max 0 where the kernel has swap
 * accounting), on v1 memory.limit_in_bytes (and memory.memsw.limit_in_bytes
 * the same). With cpu: a weight proportional to cpu_milli (v2 cpu.weight =
 * cpu_milli / 10, so one CPU gets the kernel's default 100, in 1..10000; v1
 * cpu.shares = cpu_milli * 1024 / 1000, in
 * 2..262144; 0 gets the default) and a cap of cpu_milli * 100 microseconds
 * per 100 ms period, at least the kernel's 1000 (v2 cpu.max "QUOTA 100000",
 * v1 cpu.cfs_quota_us; none for 0). A limit the root cannot enforce is
 * skipped (cgroup_root_kind says which). Returns 0, GPO_EINVAL (job 0,
 * attempt 0, mem_mib < 0 or over CGROUP_MEM_MIB_MAX, path_out too short),
 * GPO_EIO (a cgroup made here is removed again). On failure path_out is
 * untouched.
 */
int cgroup_create(const struct cgroup_root *root, uint64_t job, uint32_t attempt,
                  uint32_t cpu_milli, int64_t mem_mib, char *path_out, size_t len, char *err,
                  size_t errlen);

/* Moves process `pid` (0: the caller) and its threads into cgroup `path`
 * and its v1 directories; its children, forked later, are born there.
 * Returns 0, GPO_ENOENT (no such cgroup), GPO_EIO (e.g. not permitted: the
 * message says). */
int cgroup_attach(const char *path, pid_t pid, char *err, size_t errlen);

/*
 * Kills every process in cgroup `path`: writes "1" to cgroup.kill, which the
 * kernel applies to the whole subtree at once, so nothing forks its way out.
 * Where there is no cgroup.kill (before Linux 5.14, or a root on cgroup
 * v1), it freezes the cgroup where it can (cgroup.freeze, or the v1
 * freezer), sends SIGKILL to each pid in cgroup.procs, thaws, and repeats
 * until the list is empty or a bounded number of rounds passed.
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
 * cgroup.events; on a v1 root, a process in its cgroup.procs).
 * Returns 0 and *ret_populated, GPO_ENOENT, GPO_EIO. */
int cgroup_populated(const char *path, bool *ret_populated, char *err, size_t errlen);

/* Removes the (empty) cgroup and its v1 directories. Returns 0 (also when
 * it was gone already), GPO_EBUSY while processes remain in it, GPO_EIO. */
int cgroup_remove(const char *path, char *err, size_t errlen);

/* The processes in the cgroup itself (cgroup.procs). Returns 0 with
 * *ret_pids (caller frees with free(); NULL when *ret_n is 0) and *ret_n,
 * GPO_ENOENT, GPO_EIO, GPO_ENOMEM. */
int cgroup_pids(const char *path, pid_t **ret_pids, size_t *ret_n, char *err, size_t errlen);

/* How many of the cgroup's processes the kernel's OOM killer has ended at
 * its memory limit: "oom_kill" in memory.events (v2) or in the v1 memory
 * directory's memory.oom_control. Returns 0 and *ret_kills, GPO_ENOENT (no
 * such cgroup), GPO_ENOTSUP (no memory controller for it), GPO_EIO. */
int cgroup_oom_kills(const char *path, uint64_t *ret_kills, char *err, size_t errlen);

#endif
